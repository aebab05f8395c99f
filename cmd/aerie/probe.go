package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/probe"
)

// cmdSimProbe is aerie sim probe: an interactive load at a rate against a
// server (a simulator, or vLLM), reporting its times to first token.
func cmdSimProbe(ctx context.Context, args []string) error {
	synopsis := "--rate R [--duration 60s] [--backend URL] [--model M] [--max-tokens N]"
	fs, lf := newFlags("sim probe", synopsis)
	describe(fs, "sim probe", synopsis, "Sends short chat requests at --rate a second (Poisson arrivals, as independent users') for --duration, and prints their times to first token: what a batch run beside them does to interactive users.\n")
	bf := addBackendFlags(fs, "http://127.0.0.1:8000", "")
	rate := fs.Float64("rate", 0, "mean requests a second (required)")
	duration := fs.Duration("duration", time.Minute, "how long to send requests; those sent are waited for")
	model := fs.String("model", "", "model to ask for (default: the first the backend serves)")
	maxTokens := fs.Int("max-tokens", probe.DefaultMaxTokens, "each answer's max_tokens")
	seed := fs.Uint64("seed", 1, "seed of the arrival times")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if _, err := lf.logger(os.Stderr); err != nil {
		return err
	}
	if !(*rate > 0) {
		return errors.New("--rate is required: requests a second, above 0")
	}
	if *duration <= 0 {
		return fmt.Errorf("--duration %v: must be above 0", *duration)
	}
	client, err := openai.New(bf.clientConfig())
	if err != nil {
		return fmt.Errorf("--backend: %w", err)
	}
	if *model == "" {
		ms, err := client.Models(ctx)
		if err != nil {
			return fmt.Errorf("ask %s for its models (or give --model): %w", bf.url, err)
		}
		if len(ms) == 0 {
			return fmt.Errorf("%s serves no model", bf.url)
		}
		*model = ms[0].ID
	}
	rep, err := probe.Run(ctx, client, probe.Config{Rate: *rate, Duration: *duration, Model: *model, MaxTokens: *maxTokens, Seed: *seed})
	fmt.Printf("probe %s at %g/s for %v: %s\n", bf.url, *rate, *duration, rep)
	return err
}

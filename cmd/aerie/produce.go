package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/producer"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// samplingFlags are the run parameters that go into the manifest.
type samplingFlags struct {
	model       string
	maxTokens   int
	temperature optionalFloat
	topP        optionalFloat
}

func addSamplingFlags(fs *flag.FlagSet, sf *samplingFlags, modelHelp string) {
	fs.StringVar(&sf.model, "model", "", modelHelp)
	fs.IntVar(&sf.maxTokens, "max-tokens", 0, "max completion tokens per prompt, reasoning included (0: the backend fills the context window)")
	fs.Var(&sf.temperature, "temperature", "sampling temperature (unset: the backend's default)")
	fs.Var(&sf.topP, "top-p", "nucleus sampling top_p (unset: the backend's default)")
}

func (sf *samplingFlags) params() schema.Params {
	return schema.Params{MaxTokens: sf.maxTokens, Temperature: sf.temperature.v, TopP: sf.topP.v}
}

// addPolicyFlags binds the run's failure and truncation policy, which goes
// into the manifest so that every worker applies the same.
func addPolicyFlags(fs *flag.FlagSet, p *schema.Policy) {
	fs.IntVar(&p.MaxAttempts, "max-attempts", schema.DefaultMaxAttempts, "failures of a prompt's own (not backend outages) before it is dead-lettered")
	fs.StringVar(&p.OnLength, "on-length", schema.OnLengthKeep, "answers cut at max_tokens: keep (flagged truncated), dead-letter, or retry (twice the max_tokens, up to --length-retry-max-tokens)")
	fs.IntVar(&p.LengthRetryMaxTokens, "length-retry-max-tokens", 0, "cap on max_tokens for --on-length retry (0: four times --max-tokens)")
}

func cmdProduce(ctx context.Context, args []string) error {
	fs, lf := newFlags("produce", "--run NAME --prompts FILE --model M [--backend URL] [--max-tokens N] [--temperature T] [--top-p P]")
	nf := addNATSFlags(fs)
	run := fs.String("run", "", "run name (letters, digits, '-', '_')")
	prompts := fs.String("prompts", "", "JSONL file of prompts: {id, messages}, {id, conversations} or {id, prompt}")
	skip := fs.Bool("skip-invalid", false, "queue the valid lines even if some are invalid (they are listed)")
	dryRun := fs.Bool("dry-run", false, "validate the file and print what would be queued; publish nothing")
	var sf samplingFlags
	addSamplingFlags(fs, &sf, "model name as the backend serves it (required)")
	bf := addBackendFlags(fs, "", "when given, it must serve --model before anything is queued; empty: no check")
	var policy schema.Policy
	addPolicyFlags(fs, &policy)
	var prov provision.Options
	fs.IntVar(&prov.Replicas, "replicas", 1, "stream replicas when the streams are created (3 on a three-node cluster)")
	fs.DurationVar(&prov.AckWait, "ack-wait", provision.DefaultAckWait, "when the run's consumer is created: how long a silent worker keeps a prompt before it is redelivered (workers progress-ack every ack-wait/3)")
	fs.IntVar(&prov.MaxDeliver, "max-deliver", provision.DefaultMaxDeliver, "when the run's consumer is created: attempts per prompt before it is dead-lettered")
	fs.IntVar(&prov.MaxAckPending, "max-ack-pending", provision.DefaultMaxAckPending, "when the run's consumer is created: prompts in flight across all workers; at least workers x window")
	log, err := parseRunFlags(fs, lf, args, run)
	if err != nil {
		return err
	}
	if *prompts == "" {
		return errors.New("--prompts is required: a JSONL file of prompts")
	}
	cfg := producer.Config{
		Run: *run, PromptsFile: *prompts, Model: sf.model, Params: sf.params(), Policy: policy,
		SkipInvalid: *skip, Progress: os.Stderr, Logger: log, Provision: prov,
	}
	if sf.model != "" {
		if err := checkModel(ctx, bf, sf.model, log); err != nil {
			return err
		}
	}
	if *dryRun {
		if cfg.Model == "" {
			cfg.Model = "(not set)"
		}
		rep, err := producer.Validate(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d lines, %d valid, %d invalid, prompts digest %s; nothing published (--dry-run)\n", *prompts, rep.Lines, rep.Valid, rep.Invalid, rep.PromptsDigest)
		return nil
	}
	if sf.model == "" {
		return errors.New("--model is required: the model name as the backend serves it (see the backend's /v1/models)")
	}
	nc, js, err := connect(nf, "aerie-produce", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	rep, err := producer.Run(ctx, js, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("run %s: %d prompts valid, %d newly queued, %d already queued, %d invalid skipped, in %s\n",
		*run, rep.Valid, rep.Published, rep.AlreadyQueued, rep.Invalid, rep.Elapsed.Round(1e6))
	return nil
}

// checkModel makes sure the backend of --backend, if given, serves model,
// before anything is queued: a run produced for a model that no worker's
// backend serves never starts, and its manifest keeps the wrong model.
func checkModel(ctx context.Context, bf *backendFlags, model string, log *slog.Logger) error {
	if bf.url == "" {
		return nil
	}
	key, err := bf.apiKey()
	if err != nil {
		return err
	}
	client, err := openai.New(openai.Config{BaseURL: bf.url, APIKey: key})
	if err != nil {
		return fmt.Errorf("--backend: %w", err)
	}
	if err := doctor.RequireModel(ctx, client, "the backend at "+bf.url, model); err != nil {
		return err
	}
	log.Info("the backend serves the model", "backend", bf.url, "model", model)
	return nil
}

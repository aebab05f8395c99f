package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/aerie-dev/aerie/auth"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

func cmdDoctor(ctx context.Context, args []string) error {
	fs, lf := newFlags("doctor", "--nats URL --run NAME --backend URL [--model M] [--data-dir DIR] [--prompts FILE] [--workers N] [--window N|auto] [--max-window N] [--api-key-file F] [--units DIR]")
	nf := addNATSFlags(fs, auth.Admin)
	roleName := fs.String("role", "", "role whose credentials --nkey or --creds carry, checked against what its command needs: producer (aerie produce), worker (aerie work), aggregator (aerie aggregate) or admin (replay, reconcile, runs); default: the role that names the --nkey file (worker.nk: worker), else admin")
	run := fs.String("run", "", "run whose consumer, manifest and model to check (empty: skip those checks)")
	model := fs.String("model", "", "model the run will generate with, checked against the backend's while the run has no manifest (before aerie produce); once it has one, the manifest's model is checked")
	returnTokenIDs := fs.Bool("return-token-ids", false, "the run will store token ids: the test completion asks for them while the run has no manifest (once it has one, the manifest says)")
	turns := fs.String("turns", schema.TurnsLast, "the run's --turns (last or all) while it has no manifest: with all, the disk and store checks count every turn of the prompts file")
	samples := fs.Int("samples", 1, "the run's --samples while it has no manifest: the disk and store checks count every sample")
	maxTokens := fs.Int("max-tokens", 0, "the run's --max-tokens while it has no manifest: the longest answer the context and size checks allow for (0: unset)")
	yieldToServing := fs.Bool("yield-to-serving", false, "the workers will run with --yield-to-serving: the test completion carries their priority, and the backend must run vLLM's --scheduling-policy priority")
	batchPriority := fs.Int("batch-priority", worker.DefaultBatchPriority, "with --yield-to-serving, the workers' --batch-priority")
	bf := addBackendFlags(fs, "", "empty: skip the backend checks")
	engineName := addEngineFlag(fs)
	backendWait := addBackendWaitFlag(fs)
	dataDir := addDataDirFlag(fs, "", "checks that <data-dir>/<run> is writable and has room; empty: skip")
	prompts := fs.String("prompts", "", "JSONL prompts file: every prompt plus max_tokens must fit the model's max_model_len (empty: skip)")
	workers := fs.Int("workers", doctor.DefaultWorkers, "workers that will share the run (GPU hosts); MaxAckPending must cover workers x window")
	window := addWindowFlag(fs)
	fs.IntVar(&window.max, "max-window", doctor.DefaultMaxWindow, "with --window auto, the workers' --max-window: MaxAckPending must cover what windows grown that far hold")
	units := fs.String("units", "", "systemd unit file, or directory of *.service files, whose Exec commands to check (empty: skip)")
	timeout := fs.Duration("timeout", doctor.DefaultCheckTimeout, "time limit of each check but the test completion and the prompts scan (5m)")
	completion := fs.Duration("completion-timeout", doctor.DefaultCompletionTimeout, "time limit of the test completion (it may queue behind a busy batch)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if _, err := lf.logger(os.Stderr); err != nil {
		return err
	}
	key, err := bf.apiKey()
	if err != nil {
		return err
	}
	if err := checkEngineFlag(*engineName); err != nil {
		return err
	}
	bwait, err := backendWait.get()
	if err != nil {
		return err
	}
	switch {
	case *turns != schema.TurnsLast && *turns != schema.TurnsAll:
		return fmt.Errorf("--turns %q: use last or all", *turns)
	case *samples < 1:
		return fmt.Errorf("--samples %d: give at least 1", *samples)
	case *maxTokens < 0:
		return fmt.Errorf("--max-tokens %d: give 0 (unset) or more", *maxTokens)
	}
	role, err := doctorRole(*roleName, nf.nkey)
	if err != nil {
		return err
	}
	nf.role = role
	natsOpts, err := nf.authOptions()
	if err != nil {
		return err
	}
	cfg := doctor.Config{
		NATSURL: nf.url, NATSOptions: natsOpts, NATSWait: nf.wait(), BackendWait: bwait, Log: slog.Default(),
		Role: role, Run: *run, Model: *model, ReturnTokenIDs: *returnTokenIDs,
		TurnsAll: *turns == schema.TurnsAll, Samples: *samples, MaxTokens: *maxTokens,
		YieldToServing: *yieldToServing, BatchPriority: *batchPriority,
		Backend: bf.url, Engine: *engineName, APIKey: key,
		DataDir: *dataDir, PromptsFile: *prompts,
		Workers: *workers, Window: window.size, AutoWindow: window.auto, MaxWindow: window.max, Units: *units,
		CheckTimeout: *timeout, CompletionTimeout: *completion,
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	rep := doctor.Run(ctx, cfg)
	rep.Print(os.Stdout)
	if rep.Failed() {
		return fmt.Errorf("%d of %d checks failed", rep.Count(doctor.Fail), len(rep.Checks))
	}
	return nil
}

// doctorRole is the role doctor checks the credentials for: --role, or
// the role a seed file written by aerie auth init is named after
// (worker.nk), or admin, the role that may do everything.
func doctorRole(flag, nkey string) (auth.Role, error) {
	if flag != "" {
		r, err := auth.ParseRole(flag)
		if err != nil {
			return "", fmt.Errorf("--role: %w", err)
		}
		return r, nil
	}
	if nkey != "" {
		if r, err := auth.ParseRole(strings.TrimSuffix(filepath.Base(nkey), ".nk")); err == nil {
			return r, nil
		}
	}
	return auth.Admin, nil
}

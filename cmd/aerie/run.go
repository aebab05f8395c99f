package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
)

func cmdRun(ctx context.Context, args []string) error {
	fs, lf := newFlags("run", "--prompts FILE --run NAME [--data-dir DIR] [--backend URL] [--workers N] [--window N|auto] [--yield-to-serving] [--turns last|all] [--samples N] [--sim-speed X ...]")
	run := fs.String("run", "", "run name")
	prompts := fs.String("prompts", "", "JSONL file of prompts")
	dataDir := addDataDirFlag(fs, "./data", "the embedded NATS server's store is <data-dir>/nats")
	bf := addBackendFlags(fs, "", "empty: the built-in simulator (--sim-* flags)")
	engineName := addEngineFlag(fs)
	backendWait := addBackendWaitFlag(fs)
	workers := fs.Int("workers", 1, "workers in this process")
	wf := addWorkerFlags(fs)
	listen := fs.String("nats-listen", "", "embedded NATS server host:port (default 127.0.0.1, random port; the URL is logged)")
	skip := fs.Bool("skip-invalid", false, "queue the valid lines even if some are invalid")
	order := addOrderFlag(fs)
	interval := fs.Duration("event-interval", 0, "period of throughput events (default 5s)")
	metricsListen := addMetricsFlag(fs)
	httpListen := addHTTPListenFlag(fs)
	var sf samplingFlags
	addSamplingFlags(fs, &sf, "model name (default: the simulator's, or the backend's only model)")
	var policy schema.Policy
	addPolicyFlags(fs, &policy)
	sim := addSimFlags(fs, "sim-")
	var tf taskFlags
	addTaskFlags(fs, &tf)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := requireRun(*run); err != nil {
		return err
	}
	if err := checkEngineFlag(*engineName); err != nil {
		return err
	}
	if *prompts == "" {
		return errors.New("--prompts is required: a JSONL file of prompts (make run generates one)")
	}
	if err := sf.check(); err != nil {
		return err
	}
	extraction, err := tf.extraction(fs)
	if err != nil {
		return err
	}
	task, extractionPrompts := "", ""
	if extraction != nil {
		task, extractionPrompts = schema.TaskHiddenStates, *prompts
	}
	wc, err := wf.config()
	if err != nil {
		return err
	}
	key, err := bf.apiKey()
	if err != nil {
		return err
	}
	if key == "" && bf.url == "" {
		key = sim.APIKey // the built-in simulator's --sim-api-key
	}
	bwait, err := backendWait.get()
	if err != nil {
		return err
	}

	// The data directory is made here, with the modes the umask leaves,
	// before the embedded server makes it as a parent of its store.
	if err := os.MkdirAll(*dataDir, fsmode.Dir); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	// On a terminal the live display owns stderr; the full log goes to a
	// file beside the outputs.
	display := pipeline.NewDisplay(os.Stderr)
	var logOut io.Writer = os.Stderr
	var progress io.Writer = os.Stderr
	if pipeline.IsTerminal(os.Stderr) {
		dir := filepath.Join(*dataDir, *run)
		if err := os.MkdirAll(dir, fsmode.Dir); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(dir, "aerie.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, fsmode.File)
		if err != nil {
			return fmt.Errorf("open log file: %w", err)
		}
		defer f.Close()
		logOut = f
		fmt.Fprintf(os.Stderr, "aerie run %s: log in %s\n", *run, f.Name())
	}
	log, err := lf.logger(logOut)
	if err != nil {
		return err
	}
	page, pageURL, stopPage, err := startLivePage(*httpListen, *run, log)
	if err != nil {
		return err
	}
	defer stopPage()
	if page != nil && logOut != os.Stderr {
		fmt.Fprintf(os.Stderr, "aerie run %s: live page at %s\n", *run, pageURL)
	}
	sum, err := pipeline.Run(ctx, pipeline.Config{
		Run: *run, PromptsFile: *prompts, DataDir: *dataDir,
		Backend: bf.url, Engine: *engineName, APIKey: key, Sim: *sim,
		Model: sf.model, Params: sf.params(), Policy: policy,
		Turns: sf.turns, ContextReasoning: sf.contextReasoning, Samples: sf.samples, ReturnTokenIDs: sf.returnTokenIDs, Needs: sf.needs.v,
		Task: task, Extraction: extraction, VocabSize: tf.vocabSize,
		Workers: *workers, Worker: wc, NATSListen: *listen,
		MetricsListen: *metricsListen,
		EventInterval: *interval, SkipInvalid: *skip, Order: *order,
		Progress: progress, OnEvent: display.Event, Observer: page, Logger: log,
		Preflight: func(ctx context.Context, natsURL, backendURL, model string) error {
			return doctor.Preflight(ctx, doctor.Config{
				NATSURL: natsURL, Run: *run, Model: model, Backend: backendURL, Engine: *engineName, APIKey: key,
				BackendWait: bwait, Log: log,
				DataDir: *dataDir, Workers: *workers, Window: wc.Window, AutoWindow: wc.AutoWindow, ReturnTokenIDs: sf.returnTokenIDs, Samples: sf.samples,
				YieldToServing: wc.YieldToServing, BatchPriority: wc.BatchPriority,
				Extraction: extraction, PromptsFile: extractionPrompts,
			})
		},
	})
	display.Close()
	if sum != nil {
		sum.Print(os.Stdout)
	}
	if err != nil {
		return err
	}
	if !sum.Done && ctx.Err() == nil {
		slog.Warn("run ended before every prompt was accounted for")
	}
	return nil
}

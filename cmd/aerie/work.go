package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

func cmdWork(ctx context.Context, args []string) error {
	fs, lf := newFlags("work", "(--run NAME | --runs A,B | --all-runs) --backend URL [--window 200|auto] [--api-key-file F]")
	nf := addNATSFlags(fs, auth.Worker)
	run := fs.String("run", "", "run name")
	runList := fs.String("runs", "", "serve these runs (comma-separated), sharing the window by each run's priority and weight (aerie runs set); a run produced later is served when its manifest appears")
	exitWhenDone := fs.Bool("exit-when-done", false, "with --run, exit once the run is done: its aggregator has written every prompt's outcome and nothing is left to deliver (default: keep waiting for replays)")
	allRuns := fs.Bool("all-runs", false, "serve every run of the model(s) the backend serves, runs produced after the worker started included; runs of other models are skipped, and `aerie status` says so")
	bf := addBackendFlags(fs, "http://127.0.0.1:8000", "")
	engineName := addEngineFlag(fs)
	backendWait := addBackendWaitFlag(fs)
	wf := addWorkerFlags(fs)
	name := fs.String("name", "", "worker name in heartbeats and results (default <host>-<random>)")
	firstToken := fs.Duration("first-token-timeout", openai.DefaultFirstTokenTimeout, "a request fails (and is tried again) when its first token has not come this long after it was sent; generous, since vLLM queues requests behind a full batch")
	idle := fs.Duration("idle-timeout", openai.DefaultIdleTimeout, "a request fails (and is tried again) when the server sends nothing for this long after its first token; a long answer that keeps streaming never does")
	total := fs.Duration("request-timeout", 0, "optional cap on one answer from request to last token, however steadily it streams (0: no cap)")
	metricsListen := addMetricsFlag(fs)
	outDir := fs.String("out", "", "with --run of a hidden-states run: its output directory on this host, over the one it was produced with (--out) or <data-dir>/<run>/: for a shared disk mounted at another path here")
	dataDir := fs.String("data-dir", envOr("AERIE_DATA_DIR", worker.DefaultDataDir), "with a hidden-states run: its dataset and hidden_states/ go to <data-dir>/<run>/ unless the run was produced with --out; a disk the server writes to (env AERIE_DATA_DIR)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	runs, err := listedRuns(*runList)
	if err != nil {
		return err
	}
	if err := checkEngineFlag(*engineName); err != nil {
		return err
	}
	wc, err := wf.config()
	if err != nil {
		return err
	}
	wc.Run, wc.Runs, wc.AllRuns, wc.ExitWhenDone, wc.Name = *run, runs, *allRuns, *exitWhenDone, *name
	wc.DataDir, wc.Out = *dataDir, *outDir
	if err := wc.Validate(); err != nil {
		return err
	}
	key, err := bf.apiKey()
	if err != nil {
		return err
	}
	bwait, err := backendWait.get()
	if err != nil {
		return err
	}
	oc := bf.clientConfig()
	oc.FirstTokenTimeout, oc.IdleTimeout, oc.RequestTimeout = *firstToken, *idle, *total
	client, err := openai.New(oc)
	if err != nil {
		return err
	}
	// Connected first: a key of another role fails here at once, not
	// after the preflight has waited for a backend that is loading.
	nc, js, err := connect(ctx, nf, "aerie-work", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := preflightWorker(ctx, nf, wc, bf.url, *engineName, key, bwait, log); err != nil {
		return err
	}
	found, err := engine.Await(ctx, client, *engineName, func(err error) {
		log.Warn("waiting for the backend to tell its engine", "err", err)
	})
	if err != nil {
		return err
	}
	if refused := engine.Refusals(found.Plan(engine.Wants{Priority: wc.RequestPriority()})); len(refused) > 0 {
		return fmt.Errorf("%s (%s) cannot serve these workers: %s", found.Title, found.By, refused[0])
	}
	oc.Dialect = found.Dialect
	if client, err = openai.New(oc); err != nil {
		return err
	}
	wc.LoadMetrics = found.Load
	wc.Refuse = found.Refuser(wc.RequestPriority(), log)
	log.Info("engine", "engine", found.Name, "by", found.By)
	reg, stopMetrics, err := serveMetrics(ctx, *metricsListen, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	wc.Metrics, wc.Logger = reg, log
	w, err := worker.New(wc, js, client)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// listedRuns returns the runs of --runs, a comma-separated list; which
// of --run, --runs and --all-runs is given is worker.Config.Validate's
// to check.
func listedRuns(list string) ([]string, error) {
	var runs []string
	for _, r := range strings.Split(list, ",") {
		if r = strings.TrimSpace(r); r != "" {
			if err := schema.ValidateRun(r); err != nil {
				return nil, fmt.Errorf("--runs: %w", err)
			}
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// preflightWorker runs the doctor's preflight before a worker starts, so
// that what can be seen at T+0 is reported at T+0. A backend that is not
// up yet is only a warning: vLLM takes minutes to load a model and the
// worker waits for it; everything else stops the worker here.
func preflightWorker(ctx context.Context, nf *natsFlags, wc worker.Config, backend, engineName, key string, backendWait time.Duration, log *slog.Logger) error {
	natsOpts, err := nf.authOptions()
	if err != nil {
		return err
	}
	err = doctor.Preflight(ctx, doctor.Config{NATSURL: nf.url, NATSOptions: natsOpts, NATSWait: nf.wait(), BackendWait: backendWait, Log: log,
		Role: auth.Worker, Run: wc.Run, Backend: backend, Engine: engineName, APIKey: key, Window: wc.Window, AutoWindow: wc.AutoWindow,
		YieldToServing: wc.YieldToServing, BatchPriority: wc.BatchPriority, Out: wc.Out, OutRoot: wc.DataDir})
	var pe *doctor.PreflightError
	if !errors.As(err, &pe) {
		return err
	}
	var fatal []string
	for _, c := range pe.Report.Checks {
		if c.Status != doctor.Fail {
			continue
		}
		switch c.Name {
		case "backend", "completion":
			log.Warn("preflight: backend not ready; the worker waits for it", "check", c.Name, "detail", c.Detail)
		default:
			fatal = append(fatal, c.Name+": "+c.Detail+" (fix: "+c.Fix+")")
		}
	}
	if len(fatal) > 0 {
		return fmt.Errorf("preflight failed: %s", strings.Join(fatal, "; "))
	}
	return nil
}

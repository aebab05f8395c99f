// Package pipeline runs a whole aerie run in one process: an embedded NATS
// server, the simulator (unless a real backend is given), the producer, N
// workers and the aggregator. It is what `aerie run` does; running it
// again with the same run name and data directory resumes the run.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/producer"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/worker"
)

// Config configures an all-in-one run.
type Config struct {
	Run         string
	PromptsFile string
	// DataDir holds <run>/ outputs and the NATS store (nats/).
	DataDir string
	// Backend is an OpenAI-compatible base URL; empty starts the simulator
	// configured by Sim.
	Backend string
	APIKey  string
	Sim     simulator.Config
	// Model defaults to the simulator's model, or to the backend's only
	// model.
	Model  string
	Params schema.Params
	Policy schema.Policy
	// Workers and Window: defaults 1 and worker.DefaultWindow.
	Workers int
	Window  int
	Grace   time.Duration
	// NATSSyncInterval is how often the embedded server flushes to disk;
	// zero means fsync before every acknowledgement (see broker.Config).
	NATSSyncInterval time.Duration
	// NATSListen is the embedded server's host:port; empty means
	// 127.0.0.1 on a random port. Its URL is logged so that `nats` CLI
	// can inspect a run while it goes.
	NATSListen string
	// EventInterval of throughput events; zero means the aggregator's
	// default.
	EventInterval time.Duration
	SkipInvalid   bool
	// Preflight, if set, runs once the broker and the backend are up and
	// before anything is queued; an error stops the run there.
	Preflight func(ctx context.Context, natsURL, backendURL, model string) error
	// Progress receives the producer's progress; nil for none.
	Progress io.Writer
	// OnEvent sees every throughput event (the live display).
	OnEvent func(schema.Throughput)
	Logger  *slog.Logger
}

// Summary is what a run did.
type Summary struct {
	// Counts are the run's (including earlier invocations); rates are this
	// invocation's, measured from the start of its workers.
	Run                      string
	Total, Completed, Failed int
	Truncated                int
	Done                     bool
	// Paused is the time workers spent paused because the backend was
	// down (summed over workers), and HandedBack the prompts they handed
	// back meanwhile.
	Paused                     time.Duration
	HandedBack                 int64
	Wall                       time.Duration
	RequestsPerSec             float64
	TokensPerSec               float64
	Completions, FailedPath    string
	EventsPath                 string
	NATSURL, BackendURL, Model string
}

// Run runs the pipeline until every prompt is completed or failed, or ctx
// ends (Ctrl-C): then workers stop pulling, in-flight prompts get the grace
// period, and everything shuts down in order. Running it again resumes.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	start := time.Now()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := schema.ValidateRun(cfg.Run); err != nil {
		return nil, err
	}
	if cfg.DataDir == "" {
		return nil, errors.New("pipeline: a data directory is required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}

	pcfg := producer.Config{
		Run: cfg.Run, PromptsFile: cfg.PromptsFile,
		Params: cfg.Params, Policy: cfg.Policy, SkipInvalid: cfg.SkipInvalid, Progress: cfg.Progress, Logger: log,
	}

	host, port, err := listenAddr(cfg.NATSListen)
	if err != nil {
		return nil, err
	}
	srv, err := broker.Start(broker.Config{StoreDir: filepath.Join(cfg.DataDir, "nats"), Host: host, Port: port,
		SyncInterval: cfg.NATSSyncInterval, Logger: log})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	log.Info("embedded NATS server ready", "url", srv.ClientURL(), "store", filepath.Join(cfg.DataDir, "nats"))

	var wg sync.WaitGroup
	defer wg.Wait()
	simCtx, stopSim := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSim()

	backendURL := cfg.Backend
	model := cfg.Model
	if backendURL == "" {
		sim, err := simulator.New(cfg.Sim)
		if err != nil {
			return nil, err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pipeline: listen for the simulator: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sim.Serve(simCtx, l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("simulator stopped", "err", err)
			}
		}()
		backendURL = "http://" + l.Addr().String()
		if model == "" {
			model = sim.Config().Model
		}
		log.Info("simulator ready", "url", backendURL, "model", sim.Config().Model, "speed", sim.Config().Speed, "max_num_seqs", sim.Config().MaxNumSeqs)
	}
	client, err := openai.New(openai.Config{BaseURL: backendURL, APIKey: cfg.APIKey})
	if err != nil {
		return nil, err
	}
	if model == "" {
		if model, err = onlyModel(ctx, client); err != nil {
			return nil, err
		}
	}
	pcfg.Model = model
	if cfg.Preflight != nil {
		if err := cfg.Preflight(ctx, srv.ClientURL(), backendURL, model); err != nil {
			return nil, err
		}
		log.Info("preflight passed")
	}

	conn := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := srv.Connect(nats.Name("aerie-"+name), nats.MaxReconnects(-1))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return nc, js, nil
	}
	nc, js, err := conn("run")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		return nil, err
	}

	// Produce first (idempotent: on a resume it finds every prompt
	// queued), so that the manifest exists before anyone waits for it.
	rep, err := producer.Run(ctx, js, pcfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.New("interrupted while queuing prompts: run the same command again to resume (nothing is queued twice)")
		}
		return nil, err
	}
	log.Info("prompts queued", "new", rep.Published, "already_queued", rep.AlreadyQueued, "invalid_skipped", rep.Invalid)

	aggCtx, stopAgg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAgg()
	agg, err := aggregator.New(aggregator.Config{
		Run: cfg.Run, DataDir: cfg.DataDir, EventInterval: cfg.EventInterval,
		ExitWhenDone: true, OnEvent: cfg.OnEvent, Logger: log,
	}, js)
	if err != nil {
		return nil, err
	}
	aggErr := make(chan error, 1)
	go func() { aggErr <- agg.Run(aggCtx) }()

	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	workStart := time.Now()
	var all []*worker.Worker
	var workers sync.WaitGroup
	for i := range cfg.Workers {
		wnc, wjs, err := conn(fmt.Sprintf("worker-%d", i+1))
		if err != nil {
			return nil, err
		}
		w, err := worker.New(worker.Config{Run: cfg.Run, Window: cfg.Window, Grace: cfg.Grace, Logger: log}, wjs, client)
		if err != nil {
			wnc.Close()
			return nil, err
		}
		all = append(all, w)
		workers.Add(1)
		go func() {
			defer workers.Done()
			defer wnc.Close()
			if err := w.Run(workCtx); err != nil {
				log.Error("worker failed", "worker", w.Name(), "err", err)
			}
		}()
	}

	var runErr error
	select {
	case <-agg.Done():
	case <-ctx.Done():
		log.Info("interrupted: stopping workers (run the same command again to resume)")
	case runErr = <-aggErr:
		aggErr <- runErr
	}
	stopWork()
	workers.Wait()
	workTime := time.Since(workStart)
	stopAgg()
	if err := <-aggErr; err != nil && runErr == nil {
		runErr = err
	}
	stopSim()

	// Rates of this invocation, from the workers' own counters: on a
	// resume they cover only the prompts generated this time.
	var completed, tokens, handedBack int64
	var paused time.Duration
	for _, w := range all {
		s := w.Stats()
		completed += s.Completed
		tokens += s.TokensStreamed
		paused += s.Paused
		handedBack += s.HandedBack
	}
	last := agg.Last()
	return &Summary{
		Run: cfg.Run, Total: last.Total, Completed: last.Completed, Failed: last.Failed,
		Truncated: last.Truncated, Done: last.Phase == schema.PhaseDone,
		Paused: paused, HandedBack: handedBack,
		Wall:           time.Since(start),
		RequestsPerSec: float64(completed) / workTime.Seconds(), TokensPerSec: float64(tokens) / workTime.Seconds(),
		Completions: filepath.Join(agg.Dir(), aggregator.CompletionsFile),
		FailedPath:  filepath.Join(agg.Dir(), aggregator.FailedFile),
		EventsPath:  filepath.Join(agg.Dir(), aggregator.EventsFile),
		NATSURL:     srv.ClientURL(), BackendURL: backendURL, Model: model,
	}, runErr
}

func listenAddr(s string) (string, int, error) {
	if s == "" {
		return "127.0.0.1", 0, nil
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("pipeline: NATS listen address %q: %w (want host:port)", s, err)
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil {
		return "", 0, fmt.Errorf("pipeline: NATS listen port %q is not a number", p)
	}
	return host, port, nil
}

// onlyModel asks the backend which model it serves; it must serve one.
func onlyModel(ctx context.Context, c *openai.Client) (string, error) {
	models, err := c.Models(ctx)
	if err != nil {
		return "", fmt.Errorf("ask the backend for its model (or pass --model): %w", err)
	}
	if len(models) != 1 {
		ids := make([]string, len(models))
		for i, m := range models {
			ids[i] = m.ID
		}
		return "", fmt.Errorf("the backend serves %d models %v: pass --model to choose one", len(models), ids)
	}
	return models[0].ID, nil
}

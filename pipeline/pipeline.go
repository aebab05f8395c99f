// Package pipeline runs a whole aerie run in one process: an embedded NATS
// server, the simulator (unless a real backend is given), the producer, N
// workers and the aggregator. It is what `aerie run` does; running it
// again with the same run name and data directory resumes the run.
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/metrics"
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
	// Engine names the backend's engine (engine.Names), or "" or "auto"
	// to tell it from what the server shows. The built-in simulator
	// speaks the dialect Sim.Engine names.
	Engine string
	APIKey string
	Sim    simulator.Config
	// Model defaults to the simulator's model, or to the backend's only
	// model. A Model the backend does not serve is an error before
	// anything is queued.
	Model  string
	Params schema.Params
	Policy schema.Policy
	// Turns, ContextReasoning, Samples and ReturnTokenIDs are the run's
	// settings of the same names in producer.Config; their zero values
	// generate the last turn of each conversation, one sample, without
	// token ids.
	Turns            string
	ContextReasoning string
	Samples          int
	ReturnTokenIDs   bool
	// Needs are features the run needs besides its settings' (see
	// producer.Config.Needs).
	Needs []string
	// Task is the run's task kind (schema.TaskChat when empty); with
	// schema.TaskHiddenStates, Extraction says what is extracted, the
	// prompts file holds samples of token ids, and the built-in
	// simulator extracts with the same layers, hidden size and dtype
	// into <DataDir>/sim-hidden-states/<run>. VocabSize, when positive,
	// refuses samples with larger ids.
	Task       string
	Extraction *schema.Extraction
	VocabSize  int
	// maxInput and checkIDs are the backend's limits on extraction
	// samples, found once it is up.
	maxInput int
	checkIDs func(context.Context, int64) error
	// Workers is how many workers run, 1 when zero, each configured by
	// Worker: its window, grace, hand-back, hedging and yield settings as
	// aerie work takes them. Its Run, Runs and AllRuns are the run's,
	// Metrics and Logger the pipeline's, and its Speed the built-in
	// simulator's (see worker.Config.Speed); its PullWait, when zero, is
	// short (see pullWait).
	Workers int
	Worker  worker.Config

	// NATSSyncInterval is how often the embedded server flushes to disk;
	// zero means fsync before every acknowledgement (see broker.Config).
	NATSSyncInterval time.Duration
	// NATSMaxStore bounds the embedded server's JetStream store in bytes
	// (max_file_store); zero leaves the server's own default, three
	// quarters of the free disk. A run that fills it pauses until there
	// is room.
	NATSMaxStore int64
	// NATSListen is the embedded server's host:port; empty means
	// 127.0.0.1 on a random port. Its URL is logged so that `nats` CLI
	// can inspect a run while it goes.
	NATSListen string
	// MetricsListen, if set, is the host:port where the workers' and the
	// aggregator's Prometheus metrics are served together at /metrics
	// (one registry; each worker's series carry its own name); empty
	// serves none. The URL is logged.
	MetricsListen string
	// EventInterval of throughput events; zero means the aggregator's
	// default.
	EventInterval time.Duration
	SkipInvalid   bool
	// Order is the queue's order (producer.Config.Order); empty decides
	// from the prompts' length hints.
	Order string
	// Preflight, if set, runs once the broker and the backend are up and
	// before anything is queued; an error stops the run there.
	Preflight func(ctx context.Context, natsURL, backendURL, model string) error
	// Progress receives the producer's progress; nil for none.
	Progress io.Writer
	// OnEvent sees every throughput event (the live display); when
	// Progress is a terminal, only those from the moment every prompt is
	// queued, for until then the producer's progress bar has it.
	OnEvent func(schema.Throughput)
	// Observer, if set, sees what the aggregator sees (the live page).
	Observer aggregator.Observer
	Logger   *slog.Logger
}

// Summary is what a run did.
type Summary struct {
	// Counts are the run's (including earlier invocations); rates are this
	// invocation's, measured from the start of its workers.
	Run                      string
	Total, Completed, Failed int
	Truncated                int
	Done                     bool
	// HintedAnswers and HintRankCorrelation say how well the prompts'
	// length hints ranked the answers (schema.Throughput's fields).
	HintedAnswers       int
	HintRankCorrelation float64
	// Paused is the time workers spent paused because the backend was
	// down (summed over workers), and HandedBack the prompts they handed
	// back meanwhile.
	Paused     time.Duration
	HandedBack int64
	// StoreFull is the time workers waited for room in a full JetStream
	// store (summed over workers).
	StoreFull time.Duration
	Wall      time.Duration
	// RequestsPerSec counts prompts (conversations) completed, and
	// TurnsPerSec the answers generated: turns with --turns all.
	RequestsPerSec          float64
	TurnsPerSec             float64
	TokensPerSec            float64
	Completions, FailedPath string
	EventsPath              string
	// Report is the path of the run's report.html, written at the end;
	// empty when it could not be written (the log says why).
	Report                     string
	NATSURL, BackendURL, Model string
	// Simulated is true when the answers came from the built-in
	// simulator (no Backend given), not from a model.
	Simulated bool
	// Samples is the samples per prompt (Total counts samples when above
	// 1); Turns the run's turns mode, and with schema.TurnsAll TotalTurns
	// and CompletedTurns count the turns (requests) of the run.
	Samples                    int
	Turns                      string
	TotalTurns, CompletedTurns int
	// HiddenStatesDir is, for a hidden-states run, where its dataset and
	// hidden_states/ are, HiddenStatesBytes the hidden states written;
	// its token figures count input tokens extracted.
	HiddenStatesDir   string
	HiddenStatesBytes int64
}

// Run runs the pipeline until every prompt is completed or failed, or ctx
// ends (Ctrl-C): then workers stop pulling, in-flight prompts get the grace
// period, and everything shuts down in order. Running it again resumes.
//
// The workers and the aggregator start once the run's manifest is
// stored, so that they generate while the prompts are being queued. If
// queuing fails, the run stops (workers get their grace) and Run ends
// with the producer's error.
//
// Before anything is queued the backend must serve the run's model, so a
// wrong --model fails within seconds and leaves no manifest behind. If
// every worker stops with an error (none can start), Run ends with that
// error instead of waiting for answers that cannot come.
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
	// The settings are checked before anything starts; the model may be
	// settled only once the backend is up.
	check := producerConfig(cfg, cfg.Model, log)
	if check.Model == "" {
		check.Model = "(the backend's)"
	}
	if err := check.Validate(); err != nil {
		return nil, err
	}

	// Listening first: a port taken is reported before anything starts.
	var reg *prometheus.Registry
	if cfg.MetricsListen != "" {
		reg = metrics.NewRegistry()
		// Served until Run returns: through the grace period after
		// Ctrl-C too.
		ms, err := metrics.Listen(context.WithoutCancel(ctx), cfg.MetricsListen, reg, log)
		if err != nil {
			return nil, err
		}
		defer ms.Close()
	}

	srv, err := startBroker(cfg, log)
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()

	// The simulator outlives ctx: after Ctrl-C the workers' in-flight
	// prompts get their grace period against it.
	var simDone sync.WaitGroup
	defer simDone.Wait()
	simCtx, stopSim := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSim()
	be, err := startBackend(ctx, simCtx, &simDone, cfg, log)
	if err != nil {
		return nil, err
	}
	if cfg.Extraction != nil {
		cfg.maxInput, cfg.checkIDs = max(be.maxInput-1, 0), be.checkIDs
	}
	cfg.Worker.LoadMetrics = be.engine.Load
	cfg.Worker.Refuse = be.engine.Refuser(cfg.Worker.RequestPriority(), log)
	if cfg.Preflight != nil {
		if err := cfg.Preflight(ctx, srv.ClientURL(), be.url, be.model); err != nil {
			return nil, err
		}
		log.Info("preflight passed")
	}

	nc, js, err := connect(srv, "run")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	// The aggregator and the workers start as soon as the manifest is
	// stored, while the prompts are still being queued: its total is
	// final, and they take prompts as they arrive.
	prod, err := startProduce(ctx, js, cfg, be.model, log)
	if err != nil {
		return nil, err
	}
	defer func() { prod.stop(); _ = prod.wait() }()

	// The aggregator runs until the workers have stopped (it does not
	// exit when done), so that their last heartbeats reach the events and
	// the live page; stopped then, a done run's aggregator returns at once.
	aggCtx, stopAgg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAgg()
	agg, err := aggregator.New(aggregator.Config{
		Run: cfg.Run, DataDir: cfg.DataDir, EventInterval: cfg.EventInterval,
		OnEvent: onEvent(cfg, prod), Observer: cfg.Observer, Logger: log, Metrics: registerer(reg),
	}, js)
	if err != nil {
		return nil, err
	}
	aggErr := make(chan error, 1)
	go func() { aggErr <- agg.Run(aggCtx) }()

	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	workStart := time.Now()
	ws, err := startWorkers(workCtx, srv, cfg, be.client, registerer(reg), log)
	if err != nil {
		stopAgg()
		<-aggErr
		return nil, err
	}

	runErr := waitForEnd(ctx, agg, aggErr, ws, prod, log)
	if runErr != nil {
		prod.stop() // the run ends without its last prompts
	}
	if err := prod.wait(); err != nil && runErr == nil {
		runErr = err
	}
	stopWork()
	ws.wait()
	workTime := time.Since(workStart)
	stopAgg()
	if err := <-aggErr; err != nil && runErr == nil {
		runErr = err
	}
	stopSim()
	sum := summarize(cfg, start, workTime, srv, be, agg, ws)
	sum.Report = writeReport(cfg, agg.Dir(), be, log)
	return sum, runErr
}

// waitForEnd waits until the run is done, ctx ends, queuing the prompts
// fails, the aggregator fails or every worker has stopped, and returns
// the error that ends the run, if any. An error of the aggregator is put
// back in aggErr for the caller.
func waitForEnd(ctx context.Context, agg *aggregator.Aggregator, aggErr chan error, ws *workers, prod *production, log *slog.Logger) error {
	produced := prod.done
	for {
		select {
		case <-agg.Done():
			return nil
		case <-produced:
			if err := prod.err; err != nil && ctx.Err() == nil {
				log.Error("queuing the prompts failed: stopping the run", "err", err)
				return err
			}
			produced = nil // every prompt is queued: wait for the rest
			continue
		case err := <-aggErr:
			aggErr <- err
			return err
		case <-ctx.Done():
		case <-ws.stopped:
			if ctx.Err() == nil {
				return ws.err()
			}
		}
		log.Info("interrupted: stopping workers (run the same command again to resume)")
		return nil
	}
}

// startBroker starts the embedded NATS server, its store under DataDir.
func startBroker(cfg Config, log *slog.Logger) (*broker.Server, error) {
	host, port, err := listenAddr(cfg.NATSListen)
	if err != nil {
		return nil, err
	}
	store := filepath.Join(cfg.DataDir, "nats")
	srv, err := broker.Start(broker.Config{StoreDir: store, Host: host, Port: port,
		SyncInterval: cfg.NATSSyncInterval, MaxStore: cfg.NATSMaxStore, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("embedded NATS server ready", "url", srv.ClientURL(), "store", store)
	return srv, nil
}

// connect opens a connection to the embedded server that reconnects
// forever, and a JetStream context on it.
func connect(srv *broker.Server, name string) (*nats.Conn, jetstream.JetStream, error) {
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

// backend is the LLM server the run generates with.
type backend struct {
	url       string
	client    *openai.Client
	model     string
	simulated bool // the built-in simulator, started by Run
	// engine is the server's engine; client speaks its dialect.
	engine engine.Found
	// maxInput is the model's max_model_len (0: not reported), and
	// checkIDs asks the backend about a token id; extraction runs only.
	maxInput int
	checkIDs func(context.Context, int64) error
}

// startBackend connects to cfg.Backend, or starts the simulator when it
// is empty (serving until simCtx ends, done on wg), and settles the
// run's model: the one given, which the backend must serve, or else the
// simulator's or the backend's only model.
func startBackend(ctx, simCtx context.Context, wg *sync.WaitGroup, cfg Config, log *slog.Logger) (*backend, error) {
	be := &backend{url: cfg.Backend, model: cfg.Model, simulated: cfg.Backend == ""}
	where := "the backend at " + cfg.Backend
	if be.simulated {
		if x := cfg.Extraction; x != nil {
			cfg.Sim.HiddenStatesPath = filepath.Join(cfg.DataDir, "sim-hidden-states", cfg.Run)
			cfg.Sim.HiddenLayerIDs, cfg.Sim.HiddenSize, cfg.Sim.HiddenDType = x.LayerIDs, x.HiddenSize, x.DType
			if err := os.MkdirAll(cfg.Sim.HiddenStatesPath, fsmode.Dir); err != nil {
				return nil, fmt.Errorf("pipeline: the simulator's hidden-states directory: %w", err)
			}
		}
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
		be.url = "http://" + l.Addr().String()
		where = "the built-in simulator"
		if be.model == "" {
			be.model = sim.Config().Model
		}
		log.Info("simulator ready", "url", be.url, "model", sim.Config().Model, "speed", sim.Config().Speed, "max_num_seqs", sim.Config().MaxNumSeqs)
	}
	var err error
	if be.client, err = openai.New(openai.Config{BaseURL: be.url, APIKey: cfg.APIKey}); err != nil {
		return nil, err
	}
	switch {
	case be.model == "":
		be.model, err = onlyModel(ctx, be.client)
	case cfg.Model != "":
		err = doctor.RequireModel(ctx, be.client, where, be.model)
	}
	if err != nil {
		return nil, err
	}
	// The engine is told after the model check, which names what is
	// served when the model is wrong; the client then speaks its dialect.
	if be.engine, err = engine.Detect(ctx, be.client, cfg.Engine); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	if be.client, err = openai.New(openai.Config{BaseURL: be.url, APIKey: cfg.APIKey, Dialect: be.engine.Dialect}); err != nil {
		return nil, err
	}
	log.Info("engine", "engine", be.engine.Name, "by", be.engine.By)
	if cfg.Extraction != nil {
		models, err := be.client.Models(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range models {
			if m.ID == be.model {
				be.maxInput = m.MaxModelLen
			}
		}
		be.checkIDs = doctor.TokenIDCheck(be.client, be.model)
	}
	return be, nil
}

// production is the queuing of a run's prompts, going on beside its
// workers and aggregator.
type production struct {
	cancel context.CancelFunc
	// done is closed when the producer has returned, err then being
	// what it returned.
	done chan struct{}
	err  error
	// finished is set with done: see onEvent.
	finished atomic.Bool
}

// startProduce creates the streams and starts queuing the prompts
// (idempotent: on a resume it finds every prompt queued). It returns
// once the run's manifest is stored, so that the aggregator and the
// workers find it, or with the error that stopped the producer before.
func startProduce(ctx context.Context, js jetstream.JetStream, cfg Config, model string, log *slog.Logger) (*production, error) {
	if err := provision.Streams(ctx, js, provision.Options{Logger: log}); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &production{cancel: cancel, done: make(chan struct{})}
	accepted := make(chan struct{})
	pcfg := producerConfig(cfg, model, log)
	pcfg.Accepted = func(*schema.Manifest) { close(accepted) }
	go func() {
		defer close(p.done)
		defer p.finished.Store(true)
		rep, err := producer.Run(pctx, js, pcfg)
		if err != nil {
			if ctx.Err() != nil {
				err = errors.New("interrupted while queuing prompts: run the same command again to resume (nothing is queued twice)")
			}
			p.err = err
			return
		}
		log.Info("prompts queued", "prompts", rep.Valid, "samples", rep.Samples, "new", rep.Published, "already_queued", rep.AlreadyQueued, "invalid_skipped", rep.Invalid,
			"order", rep.Order, "length_hints", rep.Hinted)
	}()
	select {
	case <-accepted:
		return p, nil
	case <-p.done:
		if p.err != nil {
			cancel()
			return nil, p.err
		}
		return p, nil
	}
}

// stop asks the producer to stop; wait then returns its error.
func (p *production) stop() { p.cancel() }

// wait waits for the producer to return and returns its error.
func (p *production) wait() error {
	<-p.done
	return p.err
}

// onEvent is cfg.OnEvent, called only once the producer has returned
// when cfg.Progress is a terminal: the live display takes the terminal
// only once the producer's progress bar is finished with it.
func onEvent(cfg Config, p *production) func(schema.Throughput) {
	f := cfg.OnEvent
	if f == nil || cfg.Progress == nil || !IsTerminal(cfg.Progress) {
		return f
	}
	return func(s schema.Throughput) {
		if p.finished.Load() {
			f(s)
		}
	}
}

// producerConfig is the produce of the run, generating with model.
func producerConfig(cfg Config, model string, log *slog.Logger) producer.Config {
	return producer.Config{
		Run: cfg.Run, PromptsFile: cfg.PromptsFile, Model: model,
		Params: cfg.Params, Policy: cfg.Policy,
		Turns: cfg.Turns, ContextReasoning: cfg.ContextReasoning, Samples: cfg.Samples, ReturnTokenIDs: cfg.ReturnTokenIDs, Needs: cfg.Needs,
		SkipInvalid: cfg.SkipInvalid, Progress: cfg.Progress, Logger: log, Order: cfg.Order,
		Task: cfg.Task, Extraction: cfg.Extraction, VocabSize: cfg.VocabSize,
		MaxInputTokens: cfg.maxInput, CheckTokenIDs: cfg.checkIDs,
	}
}

// summarize reports what the run did. Rates are this invocation's, from
// the workers' own counters: on a resume they cover only the prompts
// generated this time.
func summarize(cfg Config, start time.Time, workTime time.Duration, srv *broker.Server, be *backend, agg *aggregator.Aggregator, ws *workers) *Summary {
	var completed, tokens, handedBack, turns int64
	var paused, storeFull time.Duration
	for _, w := range ws.all {
		s := w.Stats()
		storeFull += s.StoreFull
		completed += s.Completed
		tokens += s.TokensStreamed
		turns += s.Turns
		paused += s.Paused
		handedBack += s.HandedBack
	}
	last := agg.Last()
	var hsDir string
	if x := cfg.Extraction; x != nil {
		hsDir = cmp.Or(x.Out, agg.Dir())
	}
	return &Summary{
		HiddenStatesDir: hsDir, HiddenStatesBytes: last.HiddenStatesBytes,
		Run: cfg.Run, Total: last.Total, Completed: last.Completed, Failed: last.Failed,
		Truncated: last.Truncated, Done: last.Phase == schema.PhaseDone,
		HintedAnswers: last.HintedAnswers, HintRankCorrelation: last.HintRankCorrelation,
		Paused: paused, HandedBack: handedBack, StoreFull: storeFull,
		Wall:           time.Since(start),
		RequestsPerSec: float64(completed) / workTime.Seconds(), TurnsPerSec: float64(turns) / workTime.Seconds(), TokensPerSec: float64(tokens) / workTime.Seconds(),
		Completions: filepath.Join(agg.Dir(), aggregator.CompletionsFile),
		FailedPath:  filepath.Join(agg.Dir(), aggregator.FailedFile),
		EventsPath:  filepath.Join(agg.Dir(), aggregator.EventsFile),
		NATSURL:     srv.ClientURL(), BackendURL: be.url, Model: be.model, Simulated: be.simulated,
		Samples: max(cfg.Samples, 1), Turns: cfg.Turns, TotalTurns: last.TotalTurns, CompletedTurns: last.CompletedTurns,
	}
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

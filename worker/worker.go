// Package worker pulls a run's prompts from JetStream, sends each to an
// OpenAI-compatible backend (vLLM beside it on the GPU host) and publishes
// the answers. Every outcome of a prompt ends in exactly one
// acknowledgement call, chosen in one switch (outcome.go).
//
// A prompt message is one unit of the run: a prompt and a sample. With
// --turns all its conversation is generated turn by turn (turns.go), each
// finished turn stored before the next starts, and the message is held,
// with progress acks, until the whole conversation is settled.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/natsdial"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// Backend is what a worker needs of an LLM server. *openai.Client
// implements it.
type Backend interface {
	ChatStream(ctx context.Context, req openai.ChatRequest, progress openai.Progress) (*openai.Completion, error)
}

var _ Backend = (*openai.Client)(nil)

// Worker processes the prompts of one run.
type Worker struct {
	cfg     Config
	js      jetstream.JetStream
	nc      *nats.Conn
	backend Backend
	log     *slog.Logger
	// replies ends waits for acknowledgements that a lost connection
	// took with it; set by Run, nil before (the waits run their course).
	replies *natsdial.Replies

	// lanes are the runs served (see serving), set by Run before any
	// prompt is processed; lanesChanged is notified when a lane's hold
	// changes.
	lanes        atomic.Pointer[[]*lane]
	lanesChanged signal
	// sched shares the free slots between the runs (schedule.go);
	// skipped holds a skippedRun by run name for the runs not served, and
	// models the backend's model list (runswatch.go).
	sched   scheduler
	skipped sync.Map
	models  modelCache

	win      *window
	inFlight sync.Map // *flight by stream sequence, while a request generates
	attempts jetstream.KeyValue
	breaker  *breaker

	// ttfts keeps the backend's shortest time to first token, and
	// latency the moving mean of this worker's request times
	// (tailhold.go).
	ttfts   ttftLeast
	latency latencyMean
	// generating and maxGenerating count the requests at the backend.
	generating, maxGenerating atomic.Int64
	// yieldCap is the window's cap for serving traffic (0: none), and
	// yields counts the times the worker began to yield (yield.go).
	yieldCap, yields atomic.Int64
	paused           atomic.Pointer[string]
	// metrics is nil without Config.Metrics.
	metrics *metrics

	// host and backendURL are what heartbeats say of where this worker
	// runs and where its requests go (see schema.Heartbeat).
	host, backendURL string

	// lastProbeLog is when a failed probe was last logged; used by the
	// breaker's probing goroutine only.
	lastProbeLog time.Time

	// The results and dead-letter streams, looked up by Run, where a
	// redelivered prompt's earlier outcome is looked for, and, for a run
	// with --turns all, the turns stream.
	results, dead, turns jetstream.Stream
	// prompts is the prompts stream, where a hedge reads the prompt it
	// sends again (hedge.go).
	prompts jetstream.Stream
	// hedging counts the hedges running, which Run waits for as it does
	// for the deliveries.
	hedging sync.WaitGroup
	// nSupport says whether the backend answers several samples in one
	// request (samples.go), found out under nMu.
	nSupport atomic.Int32
	nMu      sync.Mutex
	// hedgeRoot is what hedges run under (see hedgeCtx), under hedgeMu.
	hedgeMu   sync.Mutex
	hedgeRoot context.Context
	// batches group-commit results and turns while Run runs.
	batches batches
	// speed is the tokens a second each of this worker's requests
	// streams (float64 bits, 0 while unknown), as the pull decision last
	// measured it; heartbeats carry it. beatNow asks the heartbeats
	// goroutine for a heartbeat at once: the first time the speed is
	// known, which slower workers wait for (hintlimit.go).
	speed   atomic.Uint64
	beatNow chan struct{}
	// room holds the pulls while the JetStream store is full
	// (storefull.go).
	room storeGate
}

// flight is one request being generated.
type flight struct {
	tokens atomic.Int64
	// state says whether the request may still be handed back at the end
	// of a run: waiting for its first token, streaming, or handed back
	// (see tail.go). sent and cancel are set as each request is sent;
	// last marks the prompt's last delivery, never handed back.
	state atomic.Int32
	last  bool
	lane  *lane
	// hint is the prompt's length hint (0: none), and attempt its
	// delivery (hintlimit.go).
	hint, attempt int
	// seq and unit are the prompt message's stream sequence and unit,
	// which heartbeats list for hedging (hedge.go); hedge marks a hedge,
	// a second copy of another worker's request, never itself hedged.
	seq   uint64
	unit  schema.Unit
	hedge bool
	// group marks a request of a message of several samples
	// (samples.go): never hedged.
	group  bool
	mu     sync.Mutex
	sent   time.Time
	cancel context.CancelCauseFunc
}

// cancelAs cancels f's request with cause, moving it to state `to`,
// if it is sent and in one of the states from; it reports whether it
// did.
func (f *flight) cancelAs(to int32, cause error, from ...int32) bool {
	f.mu.Lock()
	cancel := f.cancel
	f.mu.Unlock()
	if cancel == nil {
		return false
	}
	for _, s := range from {
		if f.state.CompareAndSwap(s, to) {
			cancel(cause)
			return true
		}
	}
	return false
}

// New returns a worker; js must be connected and backend ready.
func New(cfg Config, js jetstream.JetStream, backend Backend) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if js == nil || backend == nil {
		return nil, errors.New("worker: a JetStream context and a backend are required")
	}
	cfg = cfg.withDefaults()
	w := &Worker{
		cfg:     cfg,
		js:      js,
		nc:      js.Conn(),
		backend: backend,
		log:     workerLogger(cfg),
		win:     newWindow(cfg.Window, heldPerSlot*cfg.Window),
		beatNow: make(chan struct{}, 1),
	}
	w.host, w.backendURL = heartbeatHost(), backendLabel(backend)
	var health func(context.Context) error
	if h, ok := backend.(healthChecker); ok {
		health = h.Health
	}
	w.breaker = newBreaker(cfg.BreakerThreshold, w.probeBackend, health, func(open bool, reason string) {
		if open {
			w.log.Warn("pausing: no more pulls; prompts whose requests fail are handed back without counting against them; probing the backend", "reason", reason)
		} else {
			w.log.Info("backend healthy again: resuming", "paused_total", w.breaker.pausedFor().Round(time.Millisecond))
		}
	}, w.logProbeFailure)
	if cfg.Metrics != nil {
		if err := w.registerMetrics(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Name is the worker's name in heartbeats and results.
func (w *Worker) Name() string { return w.cfg.Name }

// Stats is a snapshot of a worker's counters.
type Stats struct {
	InFlight, MaxInFlight                          int
	TokensStreamed, Completed, DeadLettered, Retry int64
	// HandedBack counts prompts handed back because the backend was down;
	// Paused is the total time spent with the breaker open.
	HandedBack int64
	// TailHandedBack counts prompts handed back at the end of a run,
	// without a first token, for an idle worker to take.
	TailHandedBack int64
	// TailHolds counts the times the worker began to hold back, near the
	// end of the run, from prompts the other workers would finish sooner.
	TailHolds int64
	// ConsumerFull is true while the run's consumer is full (its
	// MaxAckPending reached) with prompts waiting and this worker's slots
	// free: see ackroom.go.
	ConsumerFull bool
	Paused       time.Duration
	// StoreFull is the time spent waiting for room in a full JetStream
	// store (storefull.go).
	StoreFull time.Duration
	// AlreadySettled counts redelivered prompts settled with the outcome
	// an earlier delivery had stored, without being generated again.
	AlreadySettled int64
	// MaxGenerating is the most requests this worker has had at its
	// backend at once: never more than its window.
	MaxGenerating int
	// Window is the window's size now: Config.Window, or what an
	// automatic window has made it.
	Window int
	// Turns counts the answers generated and kept: one per completed
	// prompt with --turns last, one per turn with --turns all.
	Turns int64
	// Hedges counts the hedges this worker sent at the end of a run, and
	// HedgesWon those whose answer it stored first (counted in
	// Completed); HedgedAway counts its prompts acknowledged because a
	// hedge elsewhere stored their answer first; HedgedTokens the
	// completion tokens it generated and threw away because the other
	// copy won (see hedge.go).
	Hedges, HedgesWon, HedgedAway, HedgedTokens int64
	// Runs are the counters of each run served, by name.
	Runs map[string]RunStats
}

// RunStats are a worker's counters for one run.
type RunStats struct {
	// InFlight is the run's prompts delivered and not yet settled.
	InFlight                       int
	TokensStreamed, Turns          int64
	Completed, DeadLettered        int64
	Retry, HandedBack              int64
	TailHandedBack, AlreadySettled int64
}

// Stats returns the worker's counters. MaxInFlight is the most prompts
// this worker has held at once: never more than twice its window (one
// generating and one being stored per slot; see heldPerSlot), while
// MaxGenerating never exceeds the window.
func (w *Worker) Stats() Stats {
	held, maxHeld := w.win.holding()
	s := Stats{
		InFlight: held, MaxInFlight: maxHeld, MaxGenerating: int(w.maxGenerating.Load()), Window: w.win.capacity(),
		Paused: w.breaker.pausedFor(), Runs: map[string]RunStats{},
	}
	_, s.StoreFull = w.room.isFull()
	for _, l := range w.serving() {
		s.Runs[l.run] = RunStats{InFlight: int(l.n.held.Load()), TokensStreamed: l.n.tokens.Load(), Turns: l.n.turns.Load(),
			Completed: l.n.completed.Load(), DeadLettered: l.n.deadLettered.Load(), Retry: l.n.retried.Load(),
			HandedBack: l.n.handedBack.Load(), TailHandedBack: l.n.tailHandedBack.Load(), AlreadySettled: l.n.alreadySettled.Load()}
		s.TokensStreamed += l.n.tokens.Load()
		s.Completed += l.n.completed.Load()
		s.DeadLettered += l.n.deadLettered.Load()
		s.Retry += l.n.retried.Load()
		s.HandedBack += l.n.handedBack.Load()
		s.TailHandedBack += l.n.tailHandedBack.Load()
		s.AlreadySettled += l.n.alreadySettled.Load()
		s.Turns += l.n.turns.Load()
		s.Hedges += l.n.hedges.Load()
		s.HedgesWon += l.n.hedgesWon.Load()
		s.HedgedAway += l.n.hedgedAway.Load()
		s.HedgedTokens += l.n.hedgedTokens.Load()
		s.TailHolds += l.tailHolds.Load()
		s.ConsumerFull = s.ConsumerFull || l.consumerFull.Load()
	}
	return s
}

// Run processes prompts until ctx ends, then stops pulling, lets in-flight
// prompts finish for up to Config.Grace, hands back the rest and returns
// nil. It returns an error only if it cannot start.
func (w *Worker) Run(ctx context.Context) error {
	w.replies = natsdial.WatchReplies(w.nc)
	defer w.replies.Stop()
	kv, err := w.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	window := any(w.cfg.Window)
	if w.cfg.AutoWindow {
		window = fmt.Sprintf("auto (from %d, at most %d)", w.cfg.Window, w.cfg.MaxWindow)
	}
	if w.cfg.Run != "" {
		l := w.serving()[0]
		w.log.Info("worker started", "model", l.manifest.Model, "window", window, "turns", l.manifest.TurnsMode(),
			"ack_wait", l.ackWait, "max_deliver", l.maxDeliver, "total", l.manifest.Total)
	} else {
		runs := any(w.cfg.Runs)
		if w.cfg.AllRuns {
			runs = "all"
		}
		w.log.Info("worker started: serving runs as their manifests are found", "runs", runs, "window", window)
	}

	// work ends Config.Grace after ctx: in-flight requests are then
	// cancelled and their prompts handed back.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); w.heartbeats(work) }()
	go w.breaker.run(work)
	for _, l := range w.serving() {
		w.followPeers(work, l)
	}
	// With ExitWhenDone, the run's end stops the pulls as ctx would.
	ctx, endPulls := context.WithCancel(ctx)
	defer endPulls()
	var onDone func()
	if w.cfg.ExitWhenDone {
		onDone = func() {
			w.log.Info("stopping: the run is done (--exit-when-done)")
			endPulls()
		}
	}
	for _, l := range w.serving() {
		go w.watchDone(work, l, onDone)
	}
	w.setHedgeCtx(ctx)
	go w.watchRuns(work, kv)
	go w.control(work)

	defer w.startBatches()() // stopped once every prompt is settled
	var wg sync.WaitGroup
	w.pull(ctx, &wg, work)

	reason := schema.PausedStopping
	w.paused.Store(&reason)
	held, _ := w.win.holding()
	w.log.Info("stopping: no more pulls; waiting for in-flight prompts", "in_flight", held, "grace", w.cfg.Grace)
	idle := make(chan struct{})
	go func() { wg.Wait(); w.hedging.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-time.After(w.cfg.Grace):
		held, _ := w.win.holding()
		w.log.Warn("grace period over: handing back unfinished prompts", "in_flight", held)
		stopWork()
		<-idle
	}
	stopWork()
	<-hbDone
	w.publishHeartbeats() // the final counters
	s := w.Stats()
	w.log.Info("worker stopped", "completed", s.Completed, "dead_lettered", s.DeadLettered, "retried", s.Retry,
		"handed_back", s.HandedBack, "tail_handed_back", s.TailHandedBack, "already_settled", s.AlreadySettled, "paused", s.Paused.Round(time.Millisecond), "tokens", s.TokensStreamed,
		"hedges", s.Hedges, "hedges_won", s.HedgesWon, "hedged_away", s.HedgedAway)
	return nil
}

// pull fetches prompts while ctx lasts. Window slots are taken before the
// server is asked for messages, and each pull asks for exactly as many
// messages as it took slots, so the requests generating never exceed the
// window and the prompts delivered to this worker and not settled never
// exceed what the window allows (see window), counting those in transit.
// (Consume and Messages prefetch, which would break that.)
func (w *Worker) pull(ctx context.Context, wg *sync.WaitGroup, work context.Context) {
	var failures int
	for {
		gs := w.admit(ctx)
		if gs == nil {
			return
		}
		asked := 0
		for _, g := range gs {
			asked += g.n
		}
		got, err := w.fetch(gs, wg, work)
		w.win.unused(asked - got)
		if err != nil {
			failures++
			d := retryDelay(failures, 100*time.Millisecond, pullRetryMax(err))
			w.log.Warn("pull failed; retrying", "err", err, "in", d)
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		failures = 0
	}
}

// pullRetryMax bounds the wait before a failed pull is tried again. No
// responders means the run's consumer has no leader for the moment: a
// cluster elects one within seconds, and a pull that finds it costs one
// request, so the worker asks again every second at most rather than
// backing off to 5 s and starting that much after the election.
func pullRetryMax(err error) time.Duration {
	if errors.Is(err, nats.ErrNoResponders) {
		return time.Second
	}
	return 5 * time.Second
}

// fetch pulls the prompts of the grants, in order, each run asked for
// its share and what the runs before it could not fill, and starts
// processing each prompt under work. With one run to pull from it waits
// up to PullWait for prompts; with several it does not wait, so that a
// run with nothing to deliver holds up none of the others, and tells the
// scheduler what each run had. It returns how many prompts came, and the
// first error that is not "nothing to deliver".
func (w *Worker) fetch(gs []laneGrant, wg *sync.WaitGroup, work context.Context) (int, error) {
	wait := len(gs) == 1
	total, carry := 0, 0
	for _, g := range gs {
		l, ask := g.lane, g.n+carry
		if ask == 0 {
			continue
		}
		var batch jetstream.MessageBatch
		var err error
		if wait {
			batch, err = l.cons.Fetch(ask, jetstream.FetchMaxWait(w.cfg.PullWait))
		} else {
			batch, err = l.cons.FetchNoWait(ask)
		}
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				got++
				w.win.arrived()
				l.n.held.Add(1)
				l.n.active.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer l.n.held.Add(-1)
					ls := &lease{win: w.win, slot: true}
					defer ls.end()
					w.process(work, l, msg, ls)
				}()
			}
			err = batch.Error()
		}
		if got > 0 || !wait {
			w.sched.pulled(l, ask, got, time.Now())
		}
		total, carry = total+got, ask-got
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return total, fmt.Errorf("pull the prompts of run %s: %w", l.run, err)
		}
	}
	return total, nil
}

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

	// lanes are the runs served (see serving), set by Run before any
	// prompt is processed; lanesChanged is notified when a lane's hold
	// changes.
	lanes        atomic.Pointer[[]*lane]
	lanesChanged signal

	win      *window
	inFlight sync.Map // *flight by stream sequence, while a request generates
	attempts jetstream.KeyValue
	breaker  *breaker

	tokens atomic.Int64
	// turnsGenerated counts answers generated (Stats.Turns).
	turnsGenerated atomic.Int64
	completed      atomic.Int64
	deadLettered   atomic.Int64
	retried        atomic.Int64
	handedBack     atomic.Int64 // prompts handed back during outages
	// tailHandedBack counts prompts handed back at the end of a run for
	// an idle worker (tail.go); ttfts keeps the backend's shortest time
	// to first token, and latency the moving mean of this worker's
	// request times (tailhold.go).
	tailHandedBack atomic.Int64
	ttfts          ttftLeast
	latency        latencyMean
	// alreadySettled counts redelivered prompts settled with the outcome
	// an earlier delivery stored, without generating them again.
	alreadySettled atomic.Int64
	// generating and maxGenerating count the requests at the backend.
	generating, maxGenerating atomic.Int64
	// interimTurns counts the stored turns of the conversations held.
	interimTurns atomic.Int64
	paused       atomic.Pointer[string]
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
	// batches group-commit results and turns while Run runs.
	batches batches
}

// flight is one request being generated.
type flight struct {
	tokens atomic.Int64
	// state says whether the request may still be handed back at the end
	// of a run: waiting for its first token, streaming, or handed back
	// (see tail.go). sent and cancel are set as each request is sent;
	// last marks the prompt's last delivery, never handed back.
	state  atomic.Int32
	last   bool
	lane   *lane
	mu     sync.Mutex
	sent   time.Time
	cancel context.CancelCauseFunc
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
		log:     cfg.Logger.With("worker", cfg.Name, "run", cfg.Run),
		win:     newWindow(cfg.Window, heldPerSlot*cfg.Window),
	}
	w.host, w.backendURL = heartbeatHost(), backendLabel(backend)
	w.breaker = newBreaker(cfg.BreakerThreshold, w.probeBackend, func(open bool, reason string) {
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
}

// Stats returns the worker's counters. MaxInFlight is the most prompts
// this worker has held at once: never more than twice its window (one
// generating and one being stored per slot; see heldPerSlot), while
// MaxGenerating never exceeds the window.
func (w *Worker) Stats() Stats {
	held, maxHeld := w.win.holding()
	s := Stats{
		InFlight: held, MaxInFlight: maxHeld, MaxGenerating: int(w.maxGenerating.Load()), Window: w.win.capacity(),
		TokensStreamed: w.tokens.Load(), Completed: w.completed.Load(),
		DeadLettered: w.deadLettered.Load(), Retry: w.retried.Load(),
		HandedBack: w.handedBack.Load(), TailHandedBack: w.tailHandedBack.Load(), Paused: w.breaker.pausedFor(),
		AlreadySettled: w.alreadySettled.Load(), Turns: w.turnsGenerated.Load(),
	}
	for _, l := range w.serving() {
		s.TailHolds += l.tailHolds.Load()
		s.ConsumerFull = s.ConsumerFull || l.consumerFull.Load()
	}
	return s
}

// Run processes prompts until ctx ends, then stops pulling, lets in-flight
// prompts finish for up to Config.Grace, hands back the rest and returns
// nil. It returns an error only if it cannot start.
func (w *Worker) Run(ctx context.Context) error {
	err := w.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	l := w.serving()[0]
	window := any(w.cfg.Window)
	if w.cfg.AutoWindow {
		window = fmt.Sprintf("auto (from %d, at most %d)", w.cfg.Window, w.cfg.MaxWindow)
	}
	w.log.Info("worker started", "model", l.manifest.Model, "window", window, "turns", l.manifest.TurnsMode(),
		"ack_wait", l.ackWait, "max_deliver", l.maxDeliver, "total", l.manifest.Total)

	// work ends Config.Grace after ctx: in-flight requests are then
	// cancelled and their prompts handed back.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); w.heartbeats(work) }()
	go w.breaker.run(work)
	w.followPeers(work)
	go w.control(work)

	defer w.startBatches()() // stopped once every prompt is settled
	var wg sync.WaitGroup
	w.pull(ctx, &wg, work)

	reason := schema.PausedStopping
	w.paused.Store(&reason)
	held, _ := w.win.holding()
	w.log.Info("stopping: no more pulls; waiting for in-flight prompts", "in_flight", held, "grace", w.cfg.Grace)
	idle := make(chan struct{})
	go func() { wg.Wait(); close(idle) }()
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
		"handed_back", s.HandedBack, "tail_handed_back", s.TailHandedBack, "already_settled", s.AlreadySettled, "paused", s.Paused.Round(time.Millisecond), "tokens", s.TokensStreamed)
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
		l, n := w.admit(ctx)
		if l == nil {
			return
		}
		batch, err := l.cons.Fetch(n, jetstream.FetchMaxWait(w.cfg.PullWait))
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				got++
				w.win.arrived()
				wg.Add(1)
				go func() {
					defer wg.Done()
					ls := &lease{win: w.win, slot: true}
					defer ls.end()
					w.process(work, l, msg, ls)
				}()
			}
			err = batch.Error()
		}
		w.win.unused(n - got)
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			failures++
			d := retryDelay(failures, 100*time.Millisecond, 5*time.Second)
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

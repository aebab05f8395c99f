// Package worker pulls a run's prompts from JetStream, sends each to an
// OpenAI-compatible backend (vLLM beside it on the GPU host) and publishes
// the answers. Every outcome of a prompt ends in exactly one
// acknowledgement call, chosen in one switch (policy.Settle).
//
// A prompt message is one unit of the run: a prompt and a sample. With
// --turns all its conversation is generated turn by turn (turns.go), each
// finished turn stored before the next starts, and the message is held,
// with progress acks, until the whole conversation is settled.
//
// Inside, each part owns its state: the puller (pull.go) takes window
// slots and fetches; the executor (process.go) answers one delivery
// through the requester (request.go), which alone talks to the backend;
// the settler (settle.go) ends each delivery with its one acknowledgement;
// the store (store.go) is everything kept in JetStream; the controller
// (control.go) turns a snapshot of plain values into a plan with the
// pure policy.Decide and carries it out; the reporter (heartbeat.go)
// builds heartbeats, metrics and Stats. The requests in flight are held
// by a flights.Registry alone, and the window by a window.Window.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/natsdial"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/flights"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// Worker processes the prompts of the runs it serves. Every field is set
// by New and never replaced; the parts they point to own their state.
type Worker struct {
	cfg  Config
	log  *slog.Logger
	link *link

	runs    *runSet
	slots   *window.Window
	pauses  *pauses
	store   *store
	pull    *puller
	hedges  *hedger
	control *controller
	report  *reporter
	watch   *runWatch
	// extraction is what hidden-states runs need of the worker's own.
	extraction *extractWork
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
	log := workerLogger(cfg)
	ln := &link{js: js, nc: js.Conn()}
	runs := &runSet{}
	slots := window.New(cfg.Window, policy.HeldPerSlot*cfg.Window)
	inFlight := &flights.Registry{}
	room := &storeGate{onRoom: runs.changed.notify}
	probe := &prober{log: log, backend: backend, runs: runs, priority: cfg.BatchPriority}
	var health func(context.Context) error
	if h, ok := backend.(healthChecker); ok {
		health = h.Health
	}
	probe.health = newBreaker(cfg.BreakerThreshold, probe.probe, health, func(open bool, reason string) {
		if open {
			log.Warn("pausing: no more pulls; prompts whose requests fail are handed back without counting against them; probing the backend", "reason", reason)
		} else {
			log.Info("backend healthy again: resuming", "paused_total", probe.health.pausedFor().Round(time.Millisecond))
			runs.changed.notify()
		}
	}, probe.logFailure)
	w := &Worker{cfg: cfg, log: log, link: ln, runs: runs, slots: slots,
		pauses: &pauses{breaker: probe.health, room: room, disk: &diskRoom{free: cfg.DiskFree, reserve: cfg.DiskReserve, log: log, onRoom: runs.changed.notify}}}
	w.store = &store{name: cfg.Name, link: ln, log: log, room: room}
	requests := &requester{backend: backend, health: probe.health, priority: cfg.RequestPriority()}
	w.hedges = &hedger{name: cfg.Name, link: ln, slots: slots, flights: inFlight, store: w.store, pullWait: cfg.PullWait}
	settle := &settler{name: cfg.Name, store: w.store, health: probe.health, hedges: w.hedges,
		retry: retrying{base: cfg.RetryBase, max: cfg.RetryMax, outage: cfg.OutageRetry, unfit: cfg.PullWait}}
	exec := &executor{name: cfg.Name, requests: requests, flights: inFlight, store: w.store, settler: settle, log: log, link: ln,
		extraction: &extractWork{dataDir: cfg.DataDir, out: cfg.Out, lockWait: cfg.LockWait, disk: w.pauses.disk}}
	w.hedges.exec = exec
	w.extraction = exec.extraction
	w.pull = &puller{log: log, pullWait: cfg.PullWait, runs: runs, slots: slots, flights: inFlight, pauses: w.pauses, exec: exec}
	w.control = &controller{cfg: cfg, policy: cfg.policy(), log: log, backend: backend, runs: runs, slots: slots, flights: inFlight,
		pauses: w.pauses, requests: requests, store: w.store, hedges: w.hedges, beatNow: make(chan struct{}, 1)}
	w.report = &reporter{name: cfg.Name, log: log, link: ln, oneRun: cfg.Run != "", host: heartbeatHost(), backend: backendLabel(backend),
		period: cfg.Heartbeat, runs: runs, slots: slots, flights: inFlight, pauses: w.pauses, requests: requests,
		hedges: w.hedges, sched: &w.pull.sched, control: w.control}
	w.watch = &runWatch{cfg: cfg, link: ln, log: log, backend: backend, runs: runs, report: w.report, follow: w.followLane}
	m, err := newMetrics(cfg.Metrics, cfg.Name, cfg.Run, w.report)
	if err != nil {
		return nil, err
	}
	requests.metrics, settle.metrics, w.hedges.metrics, w.watch.metrics = m, m, m, m
	return w, nil
}

// Name is the worker's name in heartbeats and results.
func (w *Worker) Name() string { return w.cfg.Name }

// Run processes prompts until ctx ends, then stops pulling, lets in-flight
// prompts finish for up to Config.Grace, hands back the rest and returns
// nil. It returns an error only if it cannot start.
func (w *Worker) Run(ctx context.Context) error {
	w.link.replies = natsdial.WatchReplies(w.link.nc)
	defer w.link.replies.Stop()
	kv, err := w.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	w.logStart()

	// work ends Config.Grace after ctx: in-flight requests are then
	// cancelled and their prompts handed back.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	beats := make(chan struct{})
	go func() { defer close(beats); w.report.heartbeats(work) }()
	go w.pauses.breaker.run(work)
	go w.extraction.sweepOrphans(work, w.log)
	// With ExitWhenDone, the run's end stops the pulls as ctx would.
	ctx, endPulls := context.WithCancel(ctx)
	defer endPulls()
	for _, l := range w.runs.serving() {
		w.followPeers(work, l)
		var onDone func()
		if w.cfg.ExitWhenDone {
			onDone = func() {
				w.log.Info("stopping: the run is done (--exit-when-done)")
				endPulls()
			}
		}
		go watchDone(work, w.link.js, l, w.cfg.Heartbeat, onDone)
	}
	w.hedges.setRoot(ctx)
	go w.watch.watch(work, kv)
	go w.control.run(work)

	defer w.store.startBatches()() // stopped once every prompt is settled
	var wg sync.WaitGroup
	w.pull.run(ctx, &wg, work)

	w.pauses.stopping.Store(true)
	held, _ := w.slots.Holding()
	w.log.Info("stopping: no more pulls; waiting for in-flight prompts", "in_flight", held, "grace", w.cfg.Grace)
	idle := make(chan struct{})
	go func() { wg.Wait(); w.hedges.running.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-time.After(w.cfg.Grace):
		held, _ := w.slots.Holding()
		w.log.Warn("grace period over: handing back unfinished prompts", "in_flight", held)
		stopWork()
		<-idle
	}
	stopWork()
	<-beats
	w.report.publish() // the final counters
	s := w.Stats()
	w.log.Info("worker stopped", "completed", s.Completed, "dead_lettered", s.DeadLettered, "retried", s.Retry,
		"handed_back", s.HandedBack, "tail_handed_back", s.TailHandedBack, "already_settled", s.AlreadySettled, "paused", s.Paused.Round(time.Millisecond), "tokens", s.TokensStreamed,
		"hedges", s.Hedges, "hedges_won", s.HedgesWon, "hedged_away", s.HedgedAway)
	return nil
}

// start opens what the worker needs: the runs bucket, the attempts
// bucket, the results, dead-letter and prompts streams, and the turns
// stream when a run may need it. With Config.Run it also waits for the
// run's manifest, and for one it has every feature of (waitServable),
// checks that the backend serves its model and opens the
// run's lane; with Runs or AllRuns the lanes open as the runs watcher
// finds their manifests.
func (w *Worker) start(ctx context.Context) (jetstream.KeyValue, error) {
	var l *lane
	if w.cfg.Run != "" {
		m, err := provision.WaitManifest(ctx, w.link.js, w.cfg.Run, w.log)
		if err != nil {
			return nil, err
		}
		if lack := schema.LackOf(m); lack != nil {
			if m, err = w.watch.waitServable(ctx, m, lack); err != nil {
				return nil, err
			}
		}
		if w.cfg.Refuse != nil {
			if err := w.cfg.Refuse(m); err != nil {
				return nil, fmt.Errorf("worker %s: run %s: %w", w.cfg.Name, m.Run, err)
			}
		}
		l = newLane(m, w.log, true)
	}
	kv, err := provision.WaitRunsBucket(ctx, w.link.js, w.log)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", w.cfg.Name, err)
	}
	// Before the backend is asked: a worker without the attempts bucket
	// cannot start, whatever its backend says.
	if w.store.attempts, err = provision.AttemptsBucket(ctx, w.link.js, w.cfg.Provision); err != nil {
		return nil, fmt.Errorf("worker %s: %w", w.cfg.Name, err)
	}
	if l != nil {
		if err := checkBackend(ctx, w.watch.backend, w.cfg.Name, w.log, l.manifest.Model); err != nil {
			return nil, err
		}
	}
	// Opened before any prompt is processed: a worker of several runs
	// may come to serve a --turns all run.
	turns := l == nil || l.manifest.TurnsMode() == schema.TurnsAll
	if err := w.store.open(ctx, w.cfg.Provision, turns); err != nil {
		return nil, err
	}
	if l != nil {
		if err := openLane(ctx, w.link.js, w.cfg, l); err != nil {
			return nil, err
		}
		w.runs.add(l)
	}
	return kv, nil
}

// logStart says the worker started, and what it serves.
func (w *Worker) logStart() {
	window := any(w.cfg.Window)
	if w.cfg.AutoWindow {
		window = fmt.Sprintf("auto (from %d, at most %d)", w.cfg.Window, w.cfg.MaxWindow)
	}
	if w.cfg.Run != "" {
		l := w.runs.serving()[0]
		w.log.Info("worker started", "model", l.manifest.Model, "window", window, "turns", l.manifest.TurnsMode(),
			"ack_wait", l.ackWait, "max_deliver", l.maxDeliver, "total", l.manifest.Total)
		return
	}
	runs := any(w.cfg.Runs)
	if w.cfg.AllRuns {
		runs = "all"
	}
	w.log.Info("worker started: serving runs as their manifests are found", "runs", runs, "window", window)
}

// followLane starts, under ctx, what a lane the runs watcher opened
// needs besides pulls.
func (w *Worker) followLane(ctx context.Context, l *lane) {
	w.followPeers(ctx, l)
	go watchDone(ctx, w.link.js, l, w.cfg.Heartbeat, nil)
}

// followPeers follows, until ctx ends, the heartbeats and hedge notices
// of the other workers of l's run. Without them no prompt is handed
// back, nor pull held back, at the end of the run.
func (w *Worker) followPeers(ctx context.Context, l *lane) {
	w.hedges.follow(ctx, l)
	sub, err := w.link.nc.Subscribe(schema.HeartbeatFilter(l.run), l.peers.heard(w.cfg.Name))
	if err != nil {
		l.log.Warn("cannot follow the other workers' heartbeats: no prompt is handed back, nor pull held back, at the end of the run", "err", err)
		return
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
}

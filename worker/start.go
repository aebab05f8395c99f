package worker

import (
	"context"
	"fmt"
	"math"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// start opens what the worker needs: the runs bucket, the attempts
// bucket, the results and dead-letter streams, and the turns stream when
// a run may need it. With Config.Run it
// also waits for the run's manifest, checks that the backend serves its
// model and opens the run's lane; with Runs or AllRuns the lanes open as
// watchRuns finds their manifests.
func (w *Worker) start(ctx context.Context) (jetstream.KeyValue, error) {
	var l *lane
	if w.cfg.Run != "" {
		m, err := provision.WaitManifest(ctx, w.js, w.cfg.Run, w.log)
		if err != nil {
			return nil, err
		}
		l = w.newLane(m)
	}
	kv, err := provision.WaitRunsBucket(ctx, w.js, w.log)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", w.cfg.Name, err)
	}
	if w.attempts, err = provision.AttemptsBucket(ctx, w.js, w.cfg.Provision); err != nil {
		return nil, fmt.Errorf("worker %s: %w", w.cfg.Name, err)
	}
	if l != nil {
		if err := w.checkBackend(ctx, l); err != nil {
			return nil, err
		}
	}
	if w.results, err = w.js.Stream(ctx, schema.ResultsStream); err == nil {
		w.dead, err = w.js.Stream(ctx, schema.DeadStream)
	}
	if err == nil {
		w.prompts, err = w.js.Stream(ctx, schema.PromptsStream)
	}
	if err != nil {
		return nil, fmt.Errorf("worker %s: look up aerie's streams (run `aerie produce` first, it creates them): %w", w.cfg.Name, err)
	}
	if l == nil || l.manifest.TurnsMode() == schema.TurnsAll {
		// Opened before any prompt is processed: a worker of several runs
		// may come to serve a --turns all run.
		if w.turns, err = provision.TurnsStream(ctx, w.js, w.cfg.Provision); err != nil {
			return nil, fmt.Errorf("worker %s: open the turns stream of a --turns all run: %w", w.cfg.Name, err)
		}
	}
	if l != nil {
		if err := w.openLane(ctx, l); err != nil {
			return nil, err
		}
		w.addLane(l)
	}
	return kv, nil
}

// newLane is the lane of the run of manifest m, not yet open.
func (w *Worker) newLane(m *schema.Manifest) *lane {
	l := &lane{run: m.Run, manifest: m, log: w.log}
	l.setHintLimit(math.Inf(1))
	l.pending.Store(-1)
	if w.cfg.Run == "" {
		l.log = w.log.With("run", m.Run)
	}
	sc := m.Schedule
	l.sched.Store(&sc)
	return l
}

// addLane starts serving l's run.
func (w *Worker) addLane(l *lane) {
	if w.cfg.Run == "" {
		w.metrics.addRun(l.run)
	}
	lanes := append(append([]*lane(nil), w.serving()...), l)
	w.lanes.Store(&lanes)
	w.lanesChanged.notify()
}

// openLane opens the workers consumer of l's run, and checks its
// MaxAckPending against what this worker may hold.
func (w *Worker) openLane(ctx context.Context, l *lane) error {
	var err error
	if l.cons, err = provision.WorkersConsumer(ctx, w.js, l.run, w.cfg.Provision); err != nil {
		return fmt.Errorf("worker %s: %w", w.cfg.Name, err)
	}
	cc := l.cons.CachedInfo().Config
	l.ackWait, l.maxDeliver = cc.AckWait, cc.MaxDeliver
	mayHold := heldPerSlot * w.cfg.Window
	if w.cfg.AutoWindow {
		mayHold = heldPerSlot * w.cfg.MaxWindow
	}
	if cc.MaxAckPending > 0 && cc.MaxAckPending < mayHold {
		l.log.Warn("consumer MaxAckPending is below what this worker may hold (two prompts per slot): slots will wait for room; raise it with nats consumer edit --max-pending",
			"consumer", cc.Durable, "max_ack_pending", cc.MaxAckPending, "window", w.cfg.Window, "may_hold", mayHold)
	}
	return nil
}

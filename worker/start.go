package worker

import (
	"context"
	"fmt"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// start waits for the run's manifest, checks the backend and opens what
// the worker needs: the attempts bucket, the results and dead-letter
// streams, the turns stream for a --turns all run, and the run's lane.
func (w *Worker) start(ctx context.Context) error {
	m, err := provision.WaitManifest(ctx, w.js, w.cfg.Run, w.log)
	if err != nil {
		return err
	}
	l := &lane{run: w.cfg.Run, manifest: m, log: w.log}
	if w.attempts, err = provision.AttemptsBucket(ctx, w.js, w.cfg.Provision); err != nil {
		return fmt.Errorf("worker %s: %w", w.cfg.Name, err)
	}
	if err := w.checkBackend(ctx, l); err != nil {
		return err
	}
	if w.results, err = w.js.Stream(ctx, schema.ResultsStream); err == nil {
		w.dead, err = w.js.Stream(ctx, schema.DeadStream)
	}
	if err != nil {
		return fmt.Errorf("worker %s: look up aerie's streams (run `aerie produce` first, it creates them): %w", w.cfg.Name, err)
	}
	if err := w.openLane(ctx, l); err != nil {
		return err
	}
	w.lanes.Store(&[]*lane{l})
	return nil
}

// openLane opens what serving l's run needs beyond its manifest: the
// turns stream for a --turns all run, and the run's workers consumer,
// whose MaxAckPending it checks against what this worker may hold.
func (w *Worker) openLane(ctx context.Context, l *lane) error {
	var err error
	if l.manifest.TurnsMode() == schema.TurnsAll && w.turns == nil {
		if w.turns, err = provision.TurnsStream(ctx, w.js, w.cfg.Provision); err != nil {
			return fmt.Errorf("worker %s: open the turns stream of a --turns all run: %w", w.cfg.Name, err)
		}
	}
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

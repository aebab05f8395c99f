package worker

import (
	"context"
	"time"

	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
)

// A worker says when its run becomes done (runs.Done), and when prompts
// come again; with Config.ExitWhenDone it then stops, as a worker does on
// SIGTERM.

// donePoll is how often a worker looks whether its runs are done.
const donePoll = 2 * time.Second

// runState is what a worker last found of its run's end.
type runState int

const (
	runUnknown runState = iota
	runGoing
	runDone
)

// watchDone follows whether l's run is done until ctx ends, logging each
// change; once it is done it calls onDone (nil: nothing).
func (w *Worker) watchDone(ctx context.Context, l *lane, onDone func()) {
	t := time.NewTicker(donePoll)
	defer t.Stop()
	state, warned := runUnknown, false
	for {
		ev, err := w.runDone(ctx, l)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if !warned {
				warned = true
				l.log.Warn("cannot tell whether the run is done: reading the aggregator's events failed (a users.conf from before workers could read them? run aerie auth init again and reload nats-server)",
					"err", err)
			}
		case ev != nil && state != runDone:
			state = runDone
			l.log.Info("run done: every prompt has its answer or its failure written", "completed", ev.Completed, "failed", ev.Failed, "total", ev.Total)
			if onDone != nil {
				onDone()
				return
			}
		case ev == nil && state == runDone:
			state = runGoing
			l.log.Info("the run has prompts again (a replay or a reconcile)")
		case ev == nil:
			state = runGoing
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runDone returns the aggregator's last event when l's run is done, and
// nil while it is not.
func (w *Worker) runDone(ctx context.Context, l *lane) (*schema.Throughput, error) {
	return runs.Done(ctx, w.js, l.run)
}

package aggregator

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// A run served by workers that serve several runs may get none of their
// slots for a while: a run of higher priority takes them, or weights
// give it little. Its events then say so (Throughput.WaitingForSlots),
// the log says when it begins and ends, and aerie_run_waiting_for_slots
// is 1, beside aerie_run_priority, so that an alert can tell a run
// starved below its rank from one that waits its turn.

// noteSlots sets s.WaitingForSlots and s.Priority; a.last must be held.
// A run waits for slots when it has prompts left to hand out and live
// workers that are not paused, none of which holds one of its prompts,
// in two snapshots running (a single one is the moment between a run's
// start and its first pull), unless the event loop found none of its
// prompts queued: lines that nothing will bring are not slots waited for
// (see unwritten.go).
func (a *Aggregator) noteSlots(s *schema.Throughput) {
	if sc := a.sched.Load(); sc != nil {
		s.Priority = sc.Priority
	}
	left := s.Total - s.Completed - s.Failed - s.InFlight
	starved := s.Phase != schema.PhaseDone && left > 0 && s.InFlight == 0 && s.Workers > len(s.PausedWorkers) && a.queuedSeen.Load() != 0
	was := a.starved >= 2
	if starved {
		a.starved++
	} else {
		a.starved = 0
	}
	s.WaitingForSlots = a.starved >= 2
	switch {
	case s.WaitingForSlots && !was:
		a.log.Info("waiting for slots: the run's workers give their slots to other runs (priority, weight)",
			"left", left, "workers", s.Workers, "priority", s.Priority)
	case was && !s.WaitingForSlots:
		a.log.Info("the run has slots again", "in_flight", s.InFlight)
	}
}

// followSchedule keeps a.sched the schedule of the run's manifest until
// ctx ends: aerie runs set changes it while the run runs.
func (a *Aggregator) followSchedule(ctx context.Context) {
	for attempt := 1; ctx.Err() == nil; attempt++ {
		kv, err := a.js.KeyValue(ctx, schema.RunsBucket)
		var w jetstream.KeyWatcher
		if err == nil {
			w, err = kv.Watch(ctx, a.cfg.Run, jetstream.UpdatesOnly())
		}
		if err != nil {
			a.log.Debug("cannot follow the run's manifest; its priority in events may be stale", "err", err)
			t := time.NewTimer(min(time.Duration(attempt)*time.Second, 30*time.Second))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		for done := false; !done; {
			select {
			case <-ctx.Done():
				_ = w.Stop()
				return
			case e, ok := <-w.Updates():
				if !ok {
					done = true
					break
				}
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				if m, err := schema.DecodeManifest(e.Value()); err == nil {
					sc := m.Schedule
					a.sched.Store(&sc)
				}
			}
		}
		_ = w.Stop()
	}
}

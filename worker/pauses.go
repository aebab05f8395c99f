package worker

import (
	"sync/atomic"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// pauses gathers what may keep the worker from pulling: its own state
// (stopping, its breaker, a full store) and each run's (see lane), so
// that every part asks policy.Holds.Pause the same question. The zero
// value is not usable; New makes it.
type pauses struct {
	// stopping is set by Run once it stops pulling.
	stopping atomic.Bool
	breaker  *breaker
	room     *storeGate
	disk     *diskRoom
}

// worker is the worker's own holds, the same for every run.
func (p *pauses) worker() policy.Holds {
	h := policy.Holds{Stopping: p.stopping.Load()}
	if open, reason := p.breaker.isOpen(); open {
		h.Breaker = reason
	}
	h.StoreFull, _ = p.room.isFull()
	h.DiskFull = p.disk.reason()
	return h
}

// of is everything that holds the worker from l's run.
func (p *pauses) of(l *lane) policy.Holds { return p.worker().With(l.holds()) }

// holds is what holds the worker from l's run of the run's own.
func (l *lane) holds() policy.Holds {
	h := policy.Holds{RunPaused: l.schedule().Paused, RunGone: l.gone.Load(), TailHold: l.tailHold.Load(), HintHold: l.hintHold.Load()}
	if le := l.lacks.Load(); le != nil {
		h.RunLacks = le.Error()
	}
	return h
}

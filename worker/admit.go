package worker

import (
	"context"
	"sync"
	"time"
)

// admit is the one place where the pull loop learns whether it may pull,
// how many prompts and from which runs: it waits until the breaker is
// closed, the window has a free slot (and room for the messages held),
// and a run may be pulled from (not paused, not held back for the tail,
// not found empty and waiting out its back-off), then takes every free
// slot and shares them between the runs (grantSlots). It returns the
// shares, in the order to try them, the slots pending in the window
// until each message arrives or is given back; nil once ctx has ended.
func (w *Worker) admit(ctx context.Context) []laneGrant {
	for {
		w.breaker.wait(ctx)
		w.room.wait(ctx)
		changed := w.lanesChanged.watch()
		n := w.win.acquirePull(ctx, w.win.capacity())
		if n == 0 {
			return nil
		}
		lanes, cs, next := w.sched.candidates(w.serving(), time.Now(), w.streamed)
		if len(lanes) > 0 {
			gs := grantSlots(n, cs)
			out := make([]laneGrant, len(gs))
			for j, g := range gs {
				out[j] = laneGrant{lane: lanes[g.i], n: g.n}
			}
			return out
		}
		// No run to pull from now: wait for one.
		w.win.unused(n)
		var due <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(time.Until(next))
			due = t.C
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-due:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// streamed is the tokens l's requests in flight have streamed so far.
func (w *Worker) streamed(l *lane) int64 {
	var n int64
	w.inFlight.Range(func(_, v any) bool {
		if f := v.(*flight); f.lane == l {
			n += f.tokens.Load()
		}
		return true
	})
	return n
}

// laneGrant is n slots to fill from a lane's run; a share that its run
// cannot fill passes on to the next.
type laneGrant struct {
	lane *lane
	n    int
}

// signal is a broadcast that something changed: watch returns a channel
// closed at the next notify. The zero value is ready to use.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) watch() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

package worker

import (
	"context"
	"sync"
)

// admit is the one place where the pull loop learns whether it may pull,
// how many prompts and from which run: it waits until the breaker is
// closed, the window has a free slot (and room for the messages held),
// and a lane is not held back, then takes as many slots as are free. It
// returns the lane and the slots taken, pending in the window until each
// message arrives or is given back; nil once ctx has ended.
func (w *Worker) admit(ctx context.Context) (*lane, int) {
	for {
		w.breaker.wait(ctx)
		changed := w.lanesChanged.watch()
		n := w.win.acquirePull(ctx, w.win.capacity())
		if n == 0 {
			return nil, 0
		}
		if l := w.pickLane(); l != nil {
			return l, n
		}
		// Every lane is held back: wait for the plan to change.
		w.win.unused(n)
		select {
		case <-ctx.Done():
			return nil, 0
		case <-changed:
		}
	}
}

// pickLane is the lane to pull from now: the first that is not held
// back; nil when every lane is.
func (w *Worker) pickLane() *lane {
	for _, l := range w.serving() {
		if !l.tailHold.Load() {
			return l
		}
	}
	return nil
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

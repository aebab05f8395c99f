package worker

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// runSet is the runs a worker serves, one lane each. Lanes are only
// added, by start for a worker of one run and by the runs watcher
// otherwise, so that a lane's index never changes; everyone reads them.
// The zero value serves no run.
type runSet struct {
	lanes atomic.Pointer[[]*lane]
	// mu orders the additions.
	mu sync.Mutex
	// changed is notified when a lane is added or its hold, schedule or
	// state changes: a pull waiting for a run to pull from looks again.
	changed signal
}

// serving is the lanes of the runs served now, in their order; none
// before Run has started them. The slice is never changed: a lane added
// replaces it.
func (s *runSet) serving() []*lane {
	if p := s.lanes.Load(); p != nil {
		return *p
	}
	return nil
}

// add starts serving l's run, as the last lane.
func (s *runSet) add(l *lane) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.serving()
	l.index = len(was)
	lanes := append(slices.Clip(was), l)
	s.lanes.Store(&lanes)
	s.changed.notify()
}

// of is the lane of run, nil when the worker does not serve it.
func (s *runSet) of(run string) *lane {
	lanes := s.serving()
	if i := slices.IndexFunc(lanes, func(l *lane) bool { return l.run == run }); i >= 0 {
		return lanes[i]
	}
	return nil
}

// newLane is the lane of the run of manifest m, with the worker's log
// (which names the run already when it serves one run), not yet open.
func newLane(m *schema.Manifest, log *slog.Logger, oneRun bool) *lane {
	l := &lane{run: m.Run, manifest: m, log: log}
	l.hintLimit.Store(math.Float64bits(math.Inf(1)))
	l.pending.Store(-1)
	if !oneRun {
		l.log = log.With("run", m.Run)
	}
	sc := m.Schedule
	l.sched.Store(&sc)
	return l
}

// openLane opens the workers consumer of l's run, and checks its
// MaxAckPending against what a worker of cfg may hold.
func openLane(ctx context.Context, js jetstream.JetStream, cfg Config, l *lane) error {
	var err error
	if l.cons, err = provision.WorkersConsumer(ctx, js, l.run, cfg.Provision); err != nil {
		return fmt.Errorf("worker %s: %w", cfg.Name, err)
	}
	cc := l.cons.CachedInfo().Config
	l.ackWait, l.maxDeliver = cc.AckWait, cc.MaxDeliver
	mayHold := policy.HeldPerSlot * cfg.Window
	if cfg.AutoWindow {
		mayHold = policy.HeldPerSlot * cfg.MaxWindow
	}
	if cc.MaxAckPending > 0 && cc.MaxAckPending < mayHold {
		l.log.Warn("consumer MaxAckPending is below what this worker may hold (two prompts per slot): slots will wait for room; raise it with nats consumer edit --max-pending",
			"consumer", cc.Durable, "max_ack_pending", cc.MaxAckPending, "window", cfg.Window, "may_hold", mayHold)
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

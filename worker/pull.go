package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/worker/internal/flights"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// puller fetches the prompts of the runs a worker serves, as many as its
// window has free slots, and starts a goroutine for each on the
// executor. The slots are taken before the server is asked for messages,
// and each pull asks for exactly as many messages as it took slots, so
// the requests generating never exceed the window and the prompts
// delivered to the worker and not settled never exceed what the window
// allows, counting those in transit. (Consume and Messages prefetch,
// which would break that.) Its fields are set by New; sched is its own.
type puller struct {
	log      *slog.Logger
	pullWait time.Duration
	runs     *runSet
	slots    *window.Window
	flights  *flights.Registry
	pauses   *pauses
	exec     *executor
	// sched shares the free slots between the runs; the heartbeats read
	// how long a run has had nothing to deliver from it.
	sched scheduler
}

// laneGrant is n slots to fill from a lane's run; a share that its run
// cannot fill passes on to the next.
type laneGrant struct {
	lane *lane
	n    int
}

// run pulls prompts while ctx lasts, each processed under work, counted
// in wg until it is settled.
func (p *puller) run(ctx context.Context, wg *sync.WaitGroup, work context.Context) {
	var failures int
	for {
		gs := p.admit(ctx)
		if gs == nil {
			return
		}
		asked := 0
		for _, g := range gs {
			asked += g.n
		}
		got, err := p.fetch(gs, wg, work)
		p.slots.Unused(asked - got)
		if err != nil {
			failures++
			d := retryDelay(failures, 100*time.Millisecond, pullRetryMax(err))
			p.log.Warn("pull failed; retrying", "err", err, "in", d)
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

// pullRetryMax bounds the wait before a failed pull is tried again. No
// responders means the run's consumer has no leader for the moment: a
// cluster elects one within seconds, and a pull that finds it costs one
// request, so the worker asks again every second at most rather than
// backing off to 5 s and starting that much after the election.
func pullRetryMax(err error) time.Duration {
	if errors.Is(err, nats.ErrNoResponders) {
		return time.Second
	}
	return 5 * time.Second
}

// admit is the one place where the pull loop learns whether it may pull,
// how many prompts and from which runs: it waits until the worker is not
// paused, the window lets a pull ask for prompts (policy.PullSize), and
// a run may be pulled from (its holds let it: policy.Holds.Pause, and it
// was not found empty and waiting out its back-off), then shares the
// slots it took between the runs (policy.GrantSlots). It returns the
// shares, in the order to try them, the slots pending in the window
// until each message arrives or is given back; nil once ctx has ended.
func (p *puller) admit(ctx context.Context) []laneGrant {
	for {
		p.pauses.breaker.wait(ctx)
		p.pauses.room.wait(ctx)
		changed := p.runs.changed.watch()
		n := p.slots.AcquirePull(ctx, p.slots.Capacity())
		if n == 0 {
			return nil
		}
		pulls := func(l *lane) bool { return p.pauses.of(l).Pause().Pulls }
		lanes, cs, next := p.sched.candidates(p.runs.serving(), time.Now(), pulls, p.flights.Streamed)
		if len(lanes) > 0 {
			gs := policy.GrantSlots(n, cs)
			out := make([]laneGrant, len(gs))
			for j, g := range gs {
				out[j] = laneGrant{lane: lanes[g.I], n: g.N}
			}
			return out
		}
		// No run to pull from now: wait for one.
		p.slots.Unused(n)
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

// fetch pulls the prompts of the grants, in order, each run asked for
// its share and what the runs before it could not fill, and starts
// processing each prompt under work. With one run to pull from it waits
// up to the pull wait for prompts; with several it does not wait, so
// that a run with nothing to deliver holds up none of the others, and
// tells the scheduler what each run had. It returns how many prompts
// came, and the first error that is not "nothing to deliver".
func (p *puller) fetch(gs []laneGrant, wg *sync.WaitGroup, work context.Context) (int, error) {
	wait := len(gs) == 1
	total, carry := 0, 0
	for _, g := range gs {
		l, ask := g.lane, g.n+carry
		if ask == 0 {
			continue
		}
		var batch jetstream.MessageBatch
		var err error
		if wait {
			batch, err = l.cons.Fetch(ask, jetstream.FetchMaxWait(p.pullWait))
		} else {
			batch, err = l.cons.FetchNoWait(ask)
		}
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				got++
				p.slots.Arrived()
				l.n.held.Add(1)
				l.n.active.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer l.n.held.Add(-1)
					lease := p.slots.Lease()
					defer lease.End()
					p.exec.process(work, l, msg, lease)
				}()
			}
			err = batch.Error()
		}
		if got > 0 || !wait {
			p.sched.pulled(l, ask, got, time.Now())
		}
		total, carry = total+got, ask-got
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return total, fmt.Errorf("pull the prompts of run %s: %w", l.run, err)
		}
	}
	return total, nil
}

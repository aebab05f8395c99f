package worker

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/flights"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// controller makes the worker's pull decision every WindowPoll: observe
// takes a snapshot of plain values, policy.Decide turns it into a plan,
// and apply carries the plan out. It is the only writer of the window's
// size after start, of the lanes' holds, hint limits and consumer-full
// states, and the only one to hand requests back or start hedges. Its
// own state (the memory, whether it yields) lives in its goroutine. The
// zero value is not usable; New makes it.
type controller struct {
	cfg     Config
	policy  policy.Config
	log     *slog.Logger
	backend Backend
	runs    *runSet
	slots   *window.Window
	flights *flights.Registry
	pauses  *pauses
	// requests is read for the requests at the backend and their pace.
	requests *requester
	store    *store
	hedges   *hedger

	// speed is the tokens a second each of this worker's requests
	// streams (float64 bits, 0 while unknown), as the last decision
	// measured it; heartbeats carry it. beatNow asks for a heartbeat at
	// once: the first time the speed is known, which slower workers wait
	// for (see policy.HintLimit). Written by the controller's goroutine.
	speed   atomic.Uint64
	beatNow chan struct{}
}

// recordDecision, when set (by the golden decisions' recorder, a test),
// is told of every decision of the worker named name before it is made,
// and returns what is told of the plan and memory it made.
var recordDecision func(c *controller, name string, p policy.Config, s policy.Snapshot, in policy.Memory) (made func(policy.Plan, policy.Memory))

// startupDecisions is how many decisions come quickly at the start.
const startupDecisions = 4

// run makes a decision every WindowPoll until ctx ends. The first
// startupDecisions come four times as often: at the start of a run a
// slow worker must learn that it is slow before the long prompts it took
// first have run far (policy.HintLimit), and each period of the first
// decisions delays them.
func (c *controller) run(ctx context.Context) {
	m := policy.NewMemory(c.policy, time.Now())
	yielding := false
	t := time.NewTimer(c.cfg.WindowPoll / 4)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n < startupDecisions {
			t.Reset(c.cfg.WindowPoll / 4)
		} else {
			t.Reset(c.cfg.WindowPoll)
		}
		s := c.observe(ctx, m)
		if ctx.Err() != nil {
			return
		}
		var pl policy.Plan
		known := m.Speed > 0
		if recordDecision != nil {
			made := recordDecision(c, c.cfg.Name, c.policy, s, m)
			pl, m = policy.Decide(c.policy, s, m)
			made(pl, m)
		} else {
			pl, m = policy.Decide(c.policy, s, m)
		}
		c.speed.Store(math.Float64bits(pl.Speed))
		if !known && pl.Speed > 0 {
			select {
			case c.beatNow <- struct{}{}:
			default:
			}
		}
		yielding = c.apply(s, pl, yielding)
	}
}

// apply carries out plan pl made from snapshot s; yielding says whether
// the worker yielded to serving traffic before, and it returns whether
// it does now.
func (c *controller) apply(s policy.Snapshot, pl policy.Plan, yielding bool) bool {
	if fb := pl.Window.FallBack; fb != nil {
		args := []any{"window", c.cfg.Window}
		if fb.Err != nil {
			args = append(args, "err", fb.Err)
		}
		c.log.Warn("--window auto: "+fb.Why+"; keeping a fixed window", args...)
	}
	if pl.Window.Kept != nil {
		c.log.Debug("window: cannot read the backend's metrics; window kept", "window", s.Size, "err", pl.Window.Kept)
	}
	if n := pl.Window.Size; n > 0 && n != s.Size {
		c.slots.Resize(n)
		level := slog.LevelDebug
		if 4*abs(n-s.Size) > s.Size {
			level = slog.LevelInfo // a change of more than a quarter is worth a line
		}
		args := []any{"from", s.Size, "to", n, "why", pl.Window.Why}
		if l := s.Load.Load; l != nil {
			args = append(args, "running", l.Running, "waiting", l.Waiting, "kv_cache", l.KVUsage, "preemptions", l.Preemptions)
		}
		c.log.Log(context.Background(), level, "window resized", args...)
	}
	yielding = c.applyYield(pl.Yield, yielding)
	if pl.Retire > 0 {
		// No slot the hand-backs free may pull their prompts back here.
		c.slots.ShrinkBy(pl.Retire)
	}
	lanes := c.runs.serving()
	changed := false
	for i, lp := range pl.Lanes {
		l, sl := lanes[i], s.Lanes[i]
		changed = l.setTailHold(lp.Hold, lp.Pending, s.Pace.Latency) || changed
		l.hintLimit.Store(math.Float64bits(lp.HintLimit))
		changed = l.setHintHold(lp.HintHold, lp.HintLimit, sl.NextHint) || changed
		if k := sl.Consumer; k != nil {
			l.pending.Store(int64(k.Pending))
		}
		if len(lp.Hedges) > 0 {
			c.hedges.start(l, lp.Hedges)
		}
		if n := c.cancel(lp.SlowBack, policy.ErrSlowForHint, policy.FlightWaiting, policy.FlightStreaming); n > 0 {
			l.log.Info("handing back prompts whose length hints are too long for this server, for faster workers",
				"prompts", n, "hint_limit", math.Round(lp.HintLimit))
		}
		l.applyFull(lp, sl.Consumer, policy.FreeSlots(s.Size, s.Generating))
		if handed := c.cancel(lp.HandBack, policy.ErrTailHandBack, policy.FlightWaiting); handed > 0 {
			l.log.Info("handing back prompts waiting without a first token, for idle workers of the run",
				"prompts", handed, "waited_over", policy.HandBackWait(c.policy, s.Pace.LeastTTFT).Round(time.Millisecond), "idle_slots", lp.IdleSlots)
		}
	}
	if changed {
		c.runs.changed.notify()
	}
	return yielding
}

// cancel hands back the requests of keys still in one of the states
// from, with cause, and returns how many.
func (c *controller) cancel(keys []policy.FlightKey, cause error, from ...policy.FlightState) int {
	n := 0
	for _, k := range keys {
		if _, ok := c.flights.Cancel(k, nil, policy.FlightHandedBack, cause, from...); ok {
			n++
		}
	}
	return n
}

// applyYield logs when the worker begins and stops yielding to serving
// traffic, and returns whether it yields now.
func (c *controller) applyYield(y policy.YieldDecision, was bool) bool {
	switch {
	case !was && y.Cap > 0:
		c.log.Info("yielding to serving traffic: window capped", "cap", y.Cap, "why", y.Why, "ttft_p95", y.P95.Round(time.Millisecond))
	case was && y.Cap == 0:
		c.log.Info("serving traffic clear: window no longer capped")
	}
	return y.Cap > 0
}

// setTailHold holds back from the run's prompts, or not, logging each
// change, and reports whether it changed.
func (l *lane) setTailHold(hold bool, pending uint64, own time.Duration) bool {
	if l.tailHold.Swap(hold) == hold {
		return false
	}
	if hold {
		l.tailHolds.Add(1)
		l.log.Info("holding back near the end of the run: the other workers would finish the prompts left sooner than this one",
			"pending", pending, "own_latency", own.Round(time.Millisecond))
		return true
	}
	l.log.Info("pulling again", "pending", pending)
	return true
}

// setHintHold holds back from the run's prompts for their length hints,
// or not, logging each change, and reports whether it changed.
func (l *lane) setHintHold(hold bool, limit float64, next int) bool {
	if l.hintHold.Swap(hold) == hold {
		return false
	}
	if hold {
		l.log.Info("holding back: the prompts next in the queue have length hints too long for this server, which is much slower than the run's other workers",
			"next_hint", next, "hint_limit", math.Round(limit))
		return true
	}
	l.log.Info("pulling again: the prompts next in the queue are within this server's hint limit, or it is no longer much slower", "hint_limit", math.Round(limit))
	return true
}

// applyFull sets the lane's consumer-full state as lp says, warning when
// it becomes full and saying when there is room again; k is the
// consumer as read, and free the worker's free slots.
func (l *lane) applyFull(lp policy.LanePlan, k *policy.Consumer, free int) {
	switch lp.Full {
	case policy.FullClear:
		if l.consumerFull.Swap(false) {
			l.log.Info("the run's consumer has room again: the window fills",
				"ack_pending", k.AckPending, "max_ack_pending", k.MaxAckPending)
		}
	case policy.FullSet:
		if l.consumerFull.Swap(true) {
			return
		}
		l.log.Warn("the run's consumer is full: as many prompts as its MaxAckPending are delivered and unsettled, so no worker gets more while prompts wait and this one has free slots",
			"consumer", k.Durable, "max_ack_pending", k.MaxAckPending, "ack_pending", k.AckPending,
			"waiting", k.Pending, "free_slots", free,
			"workers_heard", lp.Workers, "their_windows", lp.Windows,
			"fix", fmt.Sprintf("nats consumer edit %s %s --max-pending %d", schema.PromptsStream, k.Durable, lp.Need))
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

package worker

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// control runs the pull decision every WindowPoll until ctx ends:
// observe, decide, apply (see readings.go). The first startupDecisions
// come four times as often: at the start of a run a slow worker must
// learn that it is slow before the long prompts it took first have run
// far (hintlimit.go), and each period of the first decisions delays them.
func (w *Worker) control(ctx context.Context) {
	p := w.policy()
	m := memory{nextAck: time.Now().Add(p.ackEvery)}
	t := time.NewTimer(w.cfg.WindowPoll / 4)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n < startupDecisions {
			t.Reset(w.cfg.WindowPoll / 4)
		} else {
			t.Reset(w.cfg.WindowPoll)
		}
		r := w.observe(ctx, &m)
		if ctx.Err() != nil {
			return
		}
		var pl plan
		known := m.speed > 0
		if recordDecision != nil {
			done := recordDecision(w, p, r, m)
			pl, m = planPulls(p, r, m)
			done(pl, m)
		} else {
			pl, m = planPulls(p, r, m)
		}
		w.speed.Store(math.Float64bits(m.speed))
		if !known && m.speed > 0 {
			select {
			case w.beatNow <- struct{}{}:
			default:
			}
		}
		w.apply(r, pl)
	}
}

// recordDecision, when set (by the golden decisions' recorder, a test),
// is told of every decision before it is made, and returns what is told
// of the plan and memory it made.
var recordDecision func(w *Worker, p policy, r readings, in memory) (made func(plan, memory))

// startupDecisions is how many decisions come quickly at the start.
const startupDecisions = 4

// apply carries out a plan made from readings r. It is the only writer of
// the window's size after start, of the lanes' holds and consumer-full
// states, and the only one to hand requests back for the tail.
func (w *Worker) apply(r readings, pl plan) {
	if fb := pl.window.fallBack; fb != nil {
		args := []any{"window", w.cfg.Window}
		if fb.err != nil {
			args = append(args, "err", fb.err)
		}
		w.log.Warn("--window auto: "+fb.why+"; keeping a fixed window", args...)
	}
	if pl.window.kept != nil {
		w.log.Debug("window: cannot read the backend's metrics; window kept", "window", r.size, "err", pl.window.kept)
	}
	if n := pl.window.size; n > 0 && n != r.size {
		w.win.resize(n)
		level := slog.LevelDebug
		if 4*abs(n-r.size) > r.size {
			level = slog.LevelInfo // a change of more than a quarter is worth a line
		}
		args := []any{"from", r.size, "to", n, "why", pl.window.why}
		if l := r.load; l != nil {
			args = append(args, "running", l.Running, "waiting", l.Waiting, "kv_cache", l.KVUsage, "preemptions", l.Preemptions)
		}
		w.log.Log(context.Background(), level, "window resized", args...)
	}
	w.applyYield(pl.yield)
	if pl.retire > 0 {
		// No slot the hand-backs free may pull their prompts back here.
		w.win.shrinkBy(pl.retire)
	}
	changed := false
	for i, lp := range pl.lanes {
		l := r.lanes[i].lane
		changed = l.setTailHold(lp.hold, lp.pending, r.ownLatency) || changed
		l.setHintLimit(lp.hintLimit)
		changed = l.setHintHold(lp.hintHold, lp.hintLimit, r.lanes[i].nextHint) || changed
		if c := r.lanes[i].consumer; c != nil {
			l.pending.Store(int64(c.pending))
		}
		if len(lp.hedges) > 0 {
			w.startHedges(l, lp.hedges)
		}
		if n := cancelFlights(lp.slowBack, errSlowForHint, flightWaiting, flightStreaming); n > 0 {
			l.log.Info("handing back prompts whose length hints are too long for this server, for faster workers",
				"prompts", n, "hint_limit", math.Round(lp.hintLimit))
		}
		l.applyFull(lp, r.size-r.generating)
		tail := make([]*flight, len(lp.handBack))
		for i, f := range lp.handBack {
			tail[i] = f.f
		}
		if handed := cancelFlights(tail, errTailHandBack, flightWaiting); handed > 0 {
			l.log.Info("handing back prompts waiting without a first token, for idle workers of the run",
				"prompts", handed, "waited_over", r.handBackWait.Round(time.Millisecond), "idle_slots", lp.idleSlots)
		}
	}
	if changed {
		w.lanesChanged.notify()
	}
}

// cancelFlights cancels the requests of fs that are still in one of the
// states from, to be handed back with cause, and returns how many.
func cancelFlights(fs []*flight, cause error, from ...int32) int {
	n := 0
	for _, f := range fs {
		if f.cancelAs(flightHandedBack, cause, from...) {
			n++
		}
	}
	return n
}

// applyYield records the yield cap, logging when the worker begins and
// stops yielding to serving traffic.
func (w *Worker) applyYield(y yieldDecision) {
	was := w.yieldCap.Swap(int64(y.cap))
	switch {
	case was == 0 && y.cap > 0:
		w.yields.Add(1)
		w.log.Info("yielding to serving traffic: window capped", "cap", y.cap, "why", y.why, "ttft_p95", y.p95.Round(time.Millisecond))
	case was > 0 && y.cap == 0:
		w.log.Info("serving traffic clear: window no longer capped")
	}
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

// applyFull sets the lane's consumer-full state as lp says, warning
// when it becomes full and saying when there is room again; free is the
// worker's free slots.
func (l *lane) applyFull(lp lanePlan, free int) {
	c := lp.consumer
	switch lp.full {
	case fullClear:
		if l.consumerFull.Swap(false) {
			l.log.Info("the run's consumer has room again: the window fills",
				"ack_pending", c.ackPending, "max_ack_pending", c.maxAckPending)
		}
	case fullSet:
		if l.consumerFull.Swap(true) {
			return
		}
		l.log.Warn("the run's consumer is full: as many prompts as its MaxAckPending are delivered and unsettled, so no worker gets more while prompts wait and this one has free slots",
			"consumer", c.durable, "max_ack_pending", c.maxAckPending, "ack_pending", c.ackPending,
			"waiting", c.pending, "free_slots", free,
			"workers_heard", lp.workers, "their_windows", lp.windows,
			"fix", fmt.Sprintf("nats consumer edit %s %s --max-pending %d", schema.PromptsStream, c.durable, lp.need))
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

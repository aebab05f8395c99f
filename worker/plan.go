package worker

import (
	"slices"
	"time"
)

// policy is the configuration the pull decision depends on.
type policy struct {
	// auto sizes the window from the backend's load; window is the
	// fixed window (and the one an automatic window starts from and falls
	// back to), maxWindow bounds an automatic one.
	auto              bool
	window, maxWindow int
	// handBack is set when requests may be handed back at the end of a
	// run (Config.HandBackAfter positive).
	handBack bool
	// ackEvery is how often a worker looks for a full consumer.
	ackEvery time.Duration
	// yield caps the window for serving traffic, holding the server's
	// TTFT p95 to ttftSLO (see yield.go).
	yield   bool
	ttftSLO time.Duration
	// hedge sends second copies of slower workers' requests at the end
	// of a run, at most hedgeMax at once (0: as many as slots are free);
	// see hedge.go.
	hedge    bool
	hedgeMax int
}

// policy is the worker's pull policy.
func (w *Worker) policy() policy {
	return policy{auto: w.cfg.AutoWindow, window: w.cfg.Window, maxWindow: w.cfg.MaxWindow,
		handBack: w.cfg.HandBackAfter > 0, ackEvery: ackRoomPeriods * w.cfg.Heartbeat,
		yield: w.cfg.YieldToServing, ttftSLO: w.cfg.ServingTTFTSLO,
		hedge: !w.cfg.HedgeOff, hedgeMax: w.cfg.HedgeMax}
}

// memory is what the decision remembers from one poll to the next. It is
// passed to planPulls and returned by it, never kept elsewhere. The zero
// value is the memory of a worker that has just started.
type memory struct {
	// rule is the automatic window's rule with its last reading.
	rule  windowRule
	load  loadMemory
	yield yieldMemory
	// nextAck is when the consumers are next looked at for room.
	nextAck time.Time
	// fullStreak counts, per lane, the looks in a row that found its
	// consumer full.
	fullStreak []int
	// speed is this worker's tokens a second per request, measured
	// between the readings at speedAt with speedTokens streamed.
	speed       float64
	speedTokens int64
	speedAt     time.Time
}

// loadMemory is what the automatic window remembers of its readings.
type loadMemory struct {
	// read is set once a reading has succeeded; failures counts those
	// that failed before; fixed is set once the window fell back to a
	// fixed one, for good.
	read     bool
	failures int
	fixed    bool
}

// plan is what the worker does after a poll.
type plan struct {
	// window is the automatic window's decision, or the fixed window
	// restored; retire is how many slots below those taken now the
	// window shrinks to (0: none), so that the slots freed by hand-backs
	// are not used to pull the same prompts back.
	window windowDecision
	retire int
	// yield is the cap for serving traffic, which bounds the window.
	yield yieldDecision
	lanes []lanePlan
}

// fallBack is why an automatic window gave up, and the reading's error.
type fallBack struct {
	why string
	err error
}

// lanePlan is what the worker does about one run.
type lanePlan struct {
	// hold is whether to hold back from the run's prompts for the tail;
	// pending is the prompts left to deliver as read (for the log).
	hold    bool
	pending uint64
	// handBack are the requests to hand back now for idle workers, the
	// youngest first; idleSlots is the other workers' free slots.
	handBack  []waitingFlight
	idleSlots int
	// full is the consumer-full state to set: fullKeep leaves it.
	full fullChange
	// hintLimit is the longest length hint this worker starts (see
	// hintPolicy); +Inf for no limit. hintHold is set while the prompt
	// next in the run's queue is above it (hintHoldPolicy).
	hintLimit float64
	hintHold  bool
	// hedges are the other workers' requests to hedge now (hedgePolicy),
	// each once.
	hedges []peerFlight
	// slowBack are the requests to hand back for a faster worker: their
	// hints are above hintLimit (see slowFlights).
	slowBack []*flight
	// need is the MaxAckPending that the windows heard of need, with
	// the workers and windows counted, when full is fullSet.
	need, workers, windows int
	consumer               *consumerReading
}

// fullChange is a change of a lane's consumer-full state.
type fullChange int

const (
	fullKeep fullChange = iota
	fullSet
	fullClear
)

// planPulls is the pull decision: the plan for readings r under policy p,
// with memory m, and the memory to pass to the next decision. It is a
// pure function: each part of it is a policy below, tested on its own.
func planPulls(p policy, r readings, m memory) (plan, memory) {
	m.fullStreak = slices.Grow(m.fullStreak, len(r.lanes))[:len(r.lanes)]
	var pl plan
	pl.lanes = make([]lanePlan, len(r.lanes))
	pl.window, m = sizeWindow(p, r, m)
	wasCapped := m.yield.cap > 0
	pl.yield, m.yield = yieldPolicy(p, r, m.yield)
	ackDue := !r.now.Before(m.nextAck)
	if ackDue {
		m.nextAck = r.now.Add(p.ackEvery)
	}
	m = ownSpeed(r, m)
	for i := range r.lanes {
		t := tailPolicy(p, r, i)
		lp := &pl.lanes[i]
		lp.hintLimit = hintPolicy(r, i, m.speed)
		lp.hintHold = hintHoldPolicy(lp.hintLimit, r.lanes[i].nextHint, r.lanes[i].bounced)
		lp.hedges = onceEach(hedgePolicy(p, r, i, m.speed, r.lanes[i].hedges))
		lp.slowBack = slowFlights(r.flights, r.lanes[i].lane, lp.hintLimit)
		lp.hold, lp.pending, lp.handBack, lp.idleSlots = t.hold, t.pending, t.handBack, t.idleSlots
		if t.restore && pl.window.size == 0 {
			pl.window.size, pl.window.why = p.window, "prompts came again"
		}
		pl.retire += t.retire
		if ackDue {
			m.fullStreak[i] = ackRoomPolicy(r, i, m.fullStreak[i], lp)
		}
	}
	pl.window = capWindow(p, r, pl.window, pl.yield, wasCapped)
	return pl, m
}

// onceEach is fs without the requests listed before: two workers may
// list the same prompt (a redelivery beside the first delivery), and it
// is hedged once.
func onceEach(fs []peerFlight) []peerFlight {
	var out []peerFlight
	for _, f := range fs {
		if !slices.ContainsFunc(out, func(g peerFlight) bool { return g.Seq == f.Seq }) {
			out = append(out, f)
		}
	}
	return out
}

// capWindow bounds the window's decision by the yield cap: the size the
// sizer or the tail wants, or the window as it is (a fixed window that
// the cap held down: the fixed size), at most the cap. When the cap goes,
// a fixed window comes back to its size.
func capWindow(p policy, r readings, d windowDecision, y yieldDecision, wasCapped bool) windowDecision {
	if y.cap == 0 {
		if wasCapped && !p.auto && d.size == 0 && r.size < p.window {
			d.size, d.why = p.window, "serving traffic clear"
		}
		return d
	}
	want := d.size
	if want == 0 {
		want = r.size
		if wasCapped && !p.auto {
			want = p.window
		}
	}
	if want > y.cap {
		want, d.why = y.cap, "yielding to serving traffic"
		if y.why != "" {
			d.why += ": " + y.why
		}
	}
	if want != r.size {
		d.size = want
	} else {
		d.size = 0
	}
	return d
}

package policy

import (
	"slices"
	"time"
)

// Memory is what the decision remembers from one poll to the next. Decide
// takes it and returns the next; it is kept nowhere else. The zero value
// is the memory of a worker that has just started, but for NextAck (see
// NewMemory).
type Memory struct {
	// Rule is the automatic window's rule with its last reading; Load
	// what it remembers of its readings; Yield the yield policy's.
	Rule  WindowRule
	Load  LoadMemory
	Yield YieldMemory
	// NextAck is when the consumers are next looked at for room.
	NextAck time.Time
	// FullStreak counts, per lane, the looks in a row that found its
	// consumer full.
	FullStreak []int
	// Speed is this worker's tokens a second per request, measured
	// between the snapshots at SpeedAt with SpeedTokens streamed (see
	// OwnSpeed).
	Speed       float64
	SpeedTokens int64
	SpeedAt     time.Time
	// PeekAfter is, per lane, when the hints of its queue are read next
	// once a reading found none (see Reads).
	PeekAfter []time.Time
}

// NewMemory is the memory of a worker that starts at now.
func NewMemory(c Config, now time.Time) Memory {
	return Memory{NextAck: now.Add(c.AckEvery)}
}

// LoadMemory is what the automatic window remembers of its readings.
type LoadMemory struct {
	// Read is set once a reading has succeeded; Failures counts those
	// that failed before; Fixed is set once the window fell back to a
	// fixed one, for good.
	Read     bool
	Failures int
	Fixed    bool
}

// Plan is what the worker does after a poll.
type Plan struct {
	// Window is the automatic window's decision, or the fixed window
	// restored; Retire is how many slots below those taken now the window
	// shrinks to (0: none), so that the slots freed by hand-backs are not
	// used to pull the same prompts back.
	Window WindowDecision
	Retire int
	// Yield is the cap for serving traffic, which bounds the window.
	Yield YieldDecision
	// Speed is this worker's tokens a second per request (0 while
	// unknown), which its heartbeats carry.
	Speed float64
	Lanes []LanePlan
}

// LanePlan is what the worker does about one run.
type LanePlan struct {
	// Hold is whether to hold back from the run's prompts for the tail;
	// Pending is the prompts left to deliver as read (for the log).
	Hold    bool
	Pending uint64
	// HandBack are the requests to hand back now for idle workers, the
	// youngest first; IdleSlots is the other workers' free slots.
	HandBack  []FlightKey
	IdleSlots int
	// Full is the consumer-full state to set (FullKeep leaves it); with
	// FullSet, Need is the MaxAckPending that the windows heard of need,
	// with the Workers and Windows counted.
	Full                   FullChange
	Need, Workers, Windows int
	// HintLimit is the longest length hint this worker starts (see
	// HintLimit), +Inf for no limit; HintHold is set while the prompt next
	// in the run's queue is above it.
	HintLimit float64
	HintHold  bool
	// SlowBack are the requests to hand back for a faster worker: their
	// hints are above HintLimit (see SlowFlights).
	SlowBack []FlightKey
	// Hedges are the other workers' requests to hedge now, each once.
	Hedges []PeerFlight
}

// FullChange is a change of a lane's consumer-full state.
type FullChange int

const (
	FullKeep FullChange = iota
	FullSet
	FullClear
)

// Decide is the pull decision: the plan for snapshot s under c, with
// memory m, and the memory to pass to the next decision. Each part of
// it is a policy below, tested on its own.
func Decide(c Config, s Snapshot, m Memory) (Plan, Memory) {
	n := len(s.Lanes)
	// The memory passed in stays as it was: the slices are copied.
	m.FullStreak = slices.Grow(slices.Clone(m.FullStreak), n)[:n]
	m.PeekAfter = peekAfter(c, s, m.PeekAfter)
	var pl Plan
	pl.Lanes = make([]LanePlan, n)
	pl.Window, m = SizeWindow(c, s, m)
	wasCapped := m.Yield.Cap > 0
	pl.Yield, m.Yield = YieldPolicy(c, s, m.Yield)
	ackDue := !s.Now.Before(m.NextAck)
	if ackDue {
		m.NextAck = s.Now.Add(c.AckEvery)
	}
	m = OwnSpeed(s, m)
	pl.Speed = m.Speed
	waiting := waitingFlights(c, s)
	for i := range s.Lanes {
		t := tailPolicy(c, s, i, waiting[i])
		lp := &pl.Lanes[i]
		lp.HintLimit = HintLimit(s, i, m.Speed)
		lp.HintHold = HintHold(lp.HintLimit, s.Lanes[i].NextHint, s.Lanes[i].Bounced)
		lp.Hedges = onceEach(HedgePolicy(c, s, i, m.Speed, s.Lanes[i].Hedges))
		lp.SlowBack = SlowFlights(s.Flights, i, s.Lanes[i].MaxDeliver, lp.HintLimit)
		lp.Hold, lp.Pending, lp.HandBack, lp.IdleSlots = t.hold, t.pending, t.handBack, t.idleSlots
		if t.restore && pl.Window.Size == 0 {
			pl.Window.Size, pl.Window.Why = c.Window, "prompts came again"
		}
		pl.Retire += t.retire
		if ackDue {
			m.FullStreak[i] = ackRoomPolicy(s, i, m.FullStreak[i], lp)
		}
	}
	pl.Window = capWindow(c, s, pl.Window, pl.Yield, wasCapped)
	return pl, m
}

// peekAfter is, per lane, when the hints of its queue are read next: a
// reading that found none (no hint on the next prompt nor on those
// sampled) waits c.PeekEvery before the next, so that a run without
// hints costs a slow worker a few reads a minute.
func peekAfter(c Config, s Snapshot, was []time.Time) []time.Time {
	out := slices.Grow(slices.Clone(was), len(s.Lanes))[:len(s.Lanes)]
	for i, l := range s.Lanes {
		if l.NextHint == 0 && l.MeanHint == 0 {
			out[i] = s.Now.Add(c.PeekEvery)
		}
	}
	return out
}

// onceEach is fs without the requests listed before: two workers may
// list the same prompt (a redelivery beside the first delivery), and it
// is hedged once.
func onceEach(fs []PeerFlight) []PeerFlight {
	var out []PeerFlight
	for _, f := range fs {
		if !slices.ContainsFunc(out, func(g PeerFlight) bool { return g.Seq == f.Seq }) {
			out = append(out, f)
		}
	}
	return out
}

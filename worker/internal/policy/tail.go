package policy

import (
	"slices"
	"time"
)

// At the end of a run the prompts still queued inside a slow server hold
// the run up while faster workers sit idle. The tail hand-back gives
// them back: when the prompts stream has nothing left to deliver and
// another worker of the run has free slots (its heartbeats say so), a
// request that has waited longer than Config.HandBackAfter, and three
// times the backend's shortest time to first token, without a first
// token is cancelled and its prompt handed back at once (NAK without
// delay), for the idle worker to take. A request that has streamed a
// token is never handed back. The window shrinks first by as many, and
// the cancel waits until this worker has no pull open, so that the
// prompt goes to the idle worker and not back here.
//
// Near the end of a run a slow worker should not take a prompt it would
// finish later than the rest of the fleet would: the run ends with its
// last answer, and a long answer started on a slow server at the end
// decides it. Every WindowPoll a worker compares its own expected time to
// finish one more prompt (the mean time its recent requests took, from
// sending to the last token) with the time the other workers would take
// to finish the prompts left to deliver and that one: the prompts beyond
// their free slots at the rate they complete prompts together, plus the
// time one of their prompts takes (their prompts held over that rate, by
// Little's law); both times per prompt scaled by tailMargin for a long
// answer. While its own is longer it holds back: it pulls nothing and
// keeps what it holds. It counts only workers heard from within three
// heartbeats that are neither paused nor holding back and complete
// prompts: with none such (alone, peers gone, stale or paused, or before
// its first answer) it pulls as usual, so that prompts left are always
// pulled by someone.

// ttfFactor is how many of the backend's shortest times to first token
// a request must have waited, at least, to be handed back: well past
// what the server takes when it has room. The shortest, not the median:
// behind a queue that lasts, as a fixed window too large for its server
// keeps, every time to first token is mostly queue.
const ttfFactor = 3

// tailMargin scales both sides' mean time per prompt to the time of a
// long answer: the run ends with its last answer, not its mean one, and
// answer lengths vary. Scaling both keeps equal workers from holding
// back for each other.
const tailMargin = 1.5

// HandBackWait is how long a request must have waited without a first
// token to be handed back: c.HandBackAfter, or ttfFactor times the
// shortest time to first token seen if that is longer.
func HandBackWait(c Config, leastTTFT time.Duration) time.Duration {
	return max(c.HandBackAfter, ttfFactor*leastTTFT)
}

// waitingFlight is a request that may be handed back at the end of a
// run.
type waitingFlight struct {
	key  FlightKey
	sent time.Time
}

// waitingFlights are, by lane, the requests of s that have waited
// HandBackWait without a first token and may be handed back (not last
// deliveries); none unless requests are ever handed back.
func waitingFlights(c Config, s Snapshot) [][]waitingFlight {
	out := make([][]waitingFlight, len(s.Lanes))
	if !c.handsBack() {
		return out
	}
	before := s.Now.Add(-HandBackWait(c, s.Pace.LeastTTFT))
	for _, f := range s.Flights {
		if f.Last || f.State != FlightWaiting || f.Sent.IsZero() || !f.Sent.Before(before) {
			continue
		}
		out[f.Lane] = append(out[f.Lane], waitingFlight{key: f.Key, sent: f.Sent})
	}
	return out
}

// tailDecision is what the tail policy decides for one run.
type tailDecision struct {
	hold      bool
	pending   uint64
	restore   bool
	retire    int
	handBack  []FlightKey
	idleSlots int
}

// tailPolicy decides, for lane i, whether to hold back from its prompts
// near the end of the run (holdForTail) and which of its waiting
// requests to hand back for idle workers: when the run has nothing left
// to deliver and its other workers have free slots, as many of them as
// they have slots, the youngest first, with the window retired by as
// many; not while a pull is open, which would take them back. A fixed
// window shrunk so comes back when prompts come again.
func tailPolicy(c Config, s Snapshot, i int, waiting []waitingFlight) tailDecision {
	l := s.Lanes[i]
	shrunk := !c.Auto && s.Size < c.Window
	if !tailNeedsConsumer(c, s, i, len(waiting)) || l.Consumer == nil {
		return tailDecision{}
	}
	pending := l.Consumer.Pending
	d := tailDecision{pending: pending,
		hold: holdForTail(int64(pending), s.Pace.Latency, l.Peers.Pulling)}
	if len(waiting) == 0 && !shrunk {
		return d
	}
	if pending > 0 {
		d.restore = shrunk
		return d
	}
	n := min(len(waiting), l.Peers.Free)
	if n == 0 {
		return d
	}
	d.retire, d.idleSlots = n, l.Peers.Free
	if s.Pulling {
		return d // the open pull ends within PullWait; hand back then
	}
	waiting = slices.Clone(waiting)
	// The youngest first: a FIFO queue would serve them last.
	slices.SortFunc(waiting, func(a, b waitingFlight) int { return b.sent.Compare(a.sent) })
	for _, w := range waiting[:n] {
		d.handBack = append(d.handBack, w.key)
	}
	return d
}

// tailNeedsConsumer reports whether the tail policy needs lane i's
// consumer read: some of its requests may be handed back (waiting), the
// window is shrunk by an earlier hand-back, other workers pull and this
// one knows its own pace, or other workers are heard and requests may be
// hedged (whether here or there depends on the run having nothing left).
func tailNeedsConsumer(c Config, s Snapshot, i, waiting int) bool {
	l := s.Lanes[i]
	shrunk := !c.Auto && s.Size < c.Window
	return waiting > 0 || shrunk || len(l.Peers.Pulling) > 0 && s.Pace.Latency > 0 || c.Hedge && l.Peers.Workers > 0
}

// holdForTail reports whether a worker whose next prompt would take own
// should take none, with pending prompts left to deliver and peers
// pulling them.
func holdForTail(pending int64, own time.Duration, peers []Peer) bool {
	if pending <= 0 || own <= 0 {
		return false
	}
	var rate float64
	var held, free int
	for _, p := range peers {
		if p.Rate <= 0 {
			continue
		}
		rate += p.Rate
		held += max(p.InFlight, 0)
		free += max(p.Free, 0)
	}
	if rate <= 0 {
		return false
	}
	latency := float64(held) / rate
	queued := max(0, float64(pending+1)-float64(free))
	return tailMargin*own.Seconds() > queued/rate+tailMargin*latency
}

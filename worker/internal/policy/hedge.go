package policy

import (
	"cmp"
	"slices"
	"time"
)

// At the end of a run on a mixed fleet, a long answer that a slow server
// started holds the whole run at that server's speed while the fast
// servers sit idle; no order of the queue can prevent it when lengths are
// not known. Hedging sends such a request a second time, from a worker
// with free slots, once the run has nothing left to deliver: the first
// answer stored wins and the other copy is cancelled. HedgePolicy
// chooses which requests are worth it.

// slowFactor is how much faster per request the fastest other worker
// must stream for this one to count as slow, and how much faster this
// one must stream than another to hedge its requests: enough that the
// noise of the two measurements cannot make equal servers hand prompts
// to each other.
const slowFactor = 1.5

// minLengthSample is how many answers longer than a request's tokens so
// far expectLength needs to take their quantiles.
const minLengthSample = 10

// longQuantile is the quantile of the lengths above a request's tokens
// so far that a hedge is judged on. What matters at the end of a run is
// not the typical answer but the long one that would hold the run, and
// the slots a hedge takes would be idle: so a request is hedged when,
// were it as long as the longest 5% of such answers, the copy would
// finish first. The tokens generated twice for that are measured by
// BenchmarkLongestFirst (docs/performance.md).
const longQuantile = 0.95

// HedgePolicy returns the requests of lane i's other workers to hedge
// now, the most worth it first: none unless hedging is on, the run's
// consumer was read with nothing left to deliver, this worker has slots
// not generating (at most the hedge limit less its running hedges) and
// knows its own speed per request (own, tokens a second). A request is
// worth a hedge when its worker streams slowFactor times slower than
// this one, it has streamed a token, it has run longer than this worker
// expects to take for its whole answer (its typical length at own
// speed), and, should it be long (see expectLength), its remaining time
// there would be longer than this worker would take for all of it.
func HedgePolicy(c Config, s Snapshot, i int, own float64, running int) []PeerFlight {
	l := s.Lanes[i]
	if !c.Hedge || own <= 0 || l.Consumer == nil || l.Consumer.Pending > 0 || len(l.Peers.Hedgeable) == 0 {
		return nil
	}
	// The slots not generating: at the end of a run most of them are
	// held by a pull waiting on the empty stream, which a hedge takes
	// over.
	budget := FreeSlots(s.Size, s.Generating)
	if c.HedgeMax > 0 {
		budget = min(budget, c.HedgeMax-running)
	}
	if budget <= 0 {
		return nil
	}
	type candidate struct {
		f    PeerFlight
		gain float64
	}
	var cs []candidate
	for _, f := range l.Peers.Hedgeable {
		if f.Hedged || f.Tokens <= 0 || f.Speed <= 0 || own < slowFactor*f.Speed {
			continue
		}
		done := float64(f.Tokens) + f.Speed*f.Age.Seconds()
		typical, long := expectLength(done, f.Hint, l.Lengths)
		ran := (time.Duration(f.ElapsedMillis)*time.Millisecond + f.Age).Seconds()
		if ran < typical/own {
			continue
		}
		here, there := long/own, (long-done)/f.Speed
		if there <= here {
			continue
		}
		cs = append(cs, candidate{f, there - here})
	}
	slices.SortFunc(cs, func(a, b candidate) int { return cmp.Compare(b.gain, a.gain) })
	out := make([]PeerFlight, 0, min(budget, len(cs)))
	for _, c := range cs[:min(budget, len(cs))] {
		out = append(out, c.f)
	}
	return out
}

// expectLength is the tokens a request is expected to take in all, done
// of them streamed: typically, the median of the run's answers longer
// than done (lengths, sorted), and long, their longQuantile. With fewer
// than minLengthSample such answers, twice and four times done. The
// prompt's length hint raises both when it is longer.
func expectLength(done float64, hint int, lengths []int) (typical, long float64) {
	i, _ := slices.BinarySearch(lengths, int(done)+1)
	above := lengths[i:]
	typical, long = 2*done, 4*done
	if len(above) >= minLengthSample {
		typical = float64(above[len(above)/2])
		long = float64(above[int(longQuantile*float64(len(above)-1))])
	}
	floor := max(float64(hint), done+1)
	return max(typical, floor), max(long, floor)
}

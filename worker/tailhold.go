package worker

import (
	"sync"
	"time"
)

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
// answer. While its own is longer it holds back: it pulls
// nothing and keeps what it holds. It counts only workers heard from
// within three heartbeats that are neither paused nor holding back and
// complete prompts: with none such (alone, peers gone, stale or paused,
// or before its first answer) it pulls as usual, so that prompts left
// are always pulled by someone.

// tailPeer is what a worker knows of another worker of the run from its
// heartbeats.
type tailPeer struct {
	rate     float64 // prompts completed a second
	inFlight int     // prompts held
	free     int     // window slots free
	speed    float64 // tokens a second of each of its requests, 0 while unknown
	// hintError is the hints' error it reports (HintError), 0 for none.
	hintError float64
}

// holdForTail reports whether a worker whose next prompt would take own
// should take none, with pending prompts left to deliver and peers
// pulling them.
func holdForTail(pending int64, own time.Duration, peers []tailPeer) bool {
	if pending <= 0 || own <= 0 {
		return false
	}
	var rate float64
	var held, free int
	for _, p := range peers {
		if p.rate <= 0 {
			continue
		}
		rate += p.rate
		held += max(p.inFlight, 0)
		free += max(p.free, 0)
	}
	if rate <= 0 {
		return false
	}
	latency := float64(held) / rate
	queued := max(0, float64(pending+1)-float64(free))
	return tailMargin*own.Seconds() > queued/rate+tailMargin*latency
}

// tailMargin scales both sides' mean time per prompt to the time of a
// long answer: the run ends with its last answer, not its mean one, and
// answer lengths vary. Scaling both keeps equal workers from holding
// back for each other.
const tailMargin = 1.5

// latencyMean keeps a moving mean of the time requests took, from
// sending to the last token. The zero value has seen none.
type latencyMean struct {
	mu   sync.Mutex
	mean time.Duration
}

// latencyWeight is the weight of each new request in the mean: about
// the last 30 requests count.
const latencyWeight = 1.0 / 32

func (l *latencyMean) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mean == 0 {
		l.mean = d
		return
	}
	l.mean += time.Duration(latencyWeight * float64(d-l.mean))
}

// get is the mean, 0 before any request.
func (l *latencyMean) get() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mean
}

// rateWeight is the weight of each heartbeat's interval in a peer's
// completion rate.
const rateWeight = 0.3

// nextRate is a peer's completion rate after a heartbeat that says it
// completed `completed` prompts, dt after the one before that said
// `was` (rate then 0 while unknown).
func nextRate(rate float64, was, completed int64, dt time.Duration) float64 {
	if dt <= 0 || completed < was {
		return rate
	}
	r := float64(completed-was) / dt.Seconds()
	if rate == 0 {
		return r
	}
	return rate + rateWeight*(r-rate)
}

package policy

import (
	"math"

	"github.com/aerie-dev/aerie/schema"
)

// Longest first (aerie produce --order longest-first) queues the longest
// answers at the head, which is right on equal servers and wrong for a
// server much slower than the others: whatever it takes from the head, a
// long answer at its speed can hold the whole run. So a worker that
// knows itself slow does not start a prompt whose length hint says it
// would still be generating it after the other workers could have
// answered the whole queue, counting that a hint may fall short of the
// answer as far as the run's hints have (HintError): HintLimit sets that
// limit. While the prompt next in the queue is above it, the worker pulls
// nothing from the run (HintHold); a prompt above it that comes anyway is
// handed back at once (SlowFor), and one started before the worker knew
// itself slow is cancelled early (SlowFlights), for a faster worker. Only
// prompts with a hint are concerned, and only while the other workers
// are heard from and known faster.

// minHintError is the least hints' error assumed (see
// schema.Heartbeat.HintError): one answer in a hundred four times as long
// as its hint, about what hints with lognormal noise of sigma 0.6 do. The
// answers measured raise it, never lower it: in a run ordered longest
// first the answers that come in first are those that ran shorter than
// their hints, the prompts at the head having the hints that err high,
// so a measure says hints are better than they are until the run is
// nearly over.
const minHintError = 4

// hintErrorQuantile is the share of answers that HintError bounds.
const hintErrorQuantile = 0.99

// slowStartShare is how far into its hinted length a request may be and
// still be handed back by SlowFlights: early enough that little is
// thrown away. A request started before its worker knew itself slow (the
// first pull of a run takes the longest prompts at once) is caught then.
const slowStartShare = 0.25

// HintLimit returns the longest length hint, in tokens, that this worker
// starts for lane i: +Inf unless the fastest other worker heard from
// streams each request slowFactor times as fast as this one (own tokens
// a second). Then a hint h is started only if h times the hints' error
// (runHintError) at own speed takes no longer than the time the other
// workers need to work off the prompts left to deliver (othersLeft).
// Until that time is known (at the start of a run) the limit is 0: the
// prompts at the head of a run ordered longest first are the ones a slow
// server must not hold, and the first minutes decide it. Without the
// consumer's count of the prompts left (not read this time), or either
// speed, there is no limit.
func HintLimit(s Snapshot, i int, own float64) float64 {
	l := s.Lanes[i]
	if l.Consumer == nil || !SlowerThanOthers(l.Peers.Pulling, own) {
		return math.Inf(1)
	}
	return othersLeft(l) * own / runHintError(l)
}

// othersLeft is the time, in seconds, that the other workers of the
// run need to work off the prompts left to deliver (0 while it cannot
// be told), the shorter of two measures:
//   - the prompts left at the rate the others complete prompts, which
//     early in a run ordered longest first is low, the first answers
//     being the longest;
//   - the prompts left, of the mean hint of those left, at the tokens a
//     second the others stream (each one's speed times the requests it
//     holds).
func othersLeft(l Lane) float64 {
	var rate, tokens float64
	for _, p := range l.Peers.Pulling {
		rate += max(p.Rate, 0)
		tokens += max(p.Speed, 0) * float64(max(p.InFlight, 0))
	}
	pending := float64(l.Consumer.Pending)
	left := math.Inf(1)
	if rate > 0 {
		left = pending / rate
	}
	if l.MeanHint > 0 && tokens > 0 {
		left = min(left, pending*l.MeanHint/tokens)
	}
	if math.IsInf(left, 1) {
		return 0
	}
	return left
}

// SlowerThanOthers reports whether the fastest of others streams each
// request slowFactor times as fast as own tokens a second, or faster.
func SlowerThanOthers(others []Peer, own float64) bool {
	var fastest float64
	for _, p := range others {
		fastest = max(fastest, p.Speed)
	}
	return own > 0 && fastest >= slowFactor*own
}

// HintError is the hints' error of the answers' lengths over their hints
// in sorted, of seen answers counted: their hintErrorQuantile, or 0
// until schema.MinHintedAnswers were counted.
func HintError(sorted []float64, seen int) float64 {
	if seen < schema.MinHintedAnswers || len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(hintErrorQuantile*float64(len(sorted))))]
}

// runHintError is the largest hints' error that this worker or another
// of the run reports, and at least minHintError.
func runHintError(l Lane) float64 {
	e := max(l.HintError, minHintError)
	for _, p := range l.Peers.Pulling {
		e = max(e, p.HintError)
	}
	return e
}

// HintHold reports whether to pull nothing from a run whose next prompt
// has length hint next (-1: not known) under the lane's limit: while it
// is above, a pull would only take prompts to hand back. In a run ordered
// longest first, every prompt after it is shorter, so the worker pulls
// again once the head of the queue comes within its limit. When the next
// prompt is not known (every prompt was delivered: what comes next are
// those handed back), it holds if it handed back a prompt for its hint
// since the last decision (bounced), so that it pulls at most once a
// decision what it will only hand back.
func HintHold(limit float64, next int, bounced bool) bool {
	switch {
	case math.IsInf(limit, 1):
		return false
	case next < 0:
		return bounced
	}
	return next > 0 && float64(next) > limit
}

// SlowFor reports whether a worker should hand back, unstarted, a prompt
// of hint tokens on its attempt-th delivery, of a run whose consumer
// delivers at most maxDeliver times (0: no limit), under limit: its hint
// is above it. A prompt is never handed back on its last deliveries
// (from half of maxDeliver on, or the tenth without one), so that
// handing back cannot use them all up.
func SlowFor(hint, attempt, maxDeliver int, limit float64) bool {
	if hint <= 0 || !(float64(hint) > limit) {
		return false
	}
	last := 10
	if maxDeliver > 0 {
		last = maxDeliver / 2
	}
	return attempt < last && float64(hint) > limit
}

// SlowFlights are the requests of lane among flights to hand back, for a
// faster worker, under the hint limit just decided: those whose hint is
// above it and which had streamed less than slowStartShare of it, sent
// and not yet handed back (never a last delivery).
func SlowFlights(flights []Flight, lane, maxDeliver int, limit float64) []FlightKey {
	if math.IsInf(limit, 1) {
		return nil // not slow: nothing to look at
	}
	var out []FlightKey
	for _, f := range flights {
		if f.Lane != lane || f.Last || !SlowFor(f.Hint, f.Attempt, maxDeliver, limit) || float64(f.Tokens) >= slowStartShare*float64(f.Hint) {
			continue
		}
		if f.Sent.IsZero() || f.State != FlightWaiting && f.State != FlightStreaming {
			continue
		}
		out = append(out, f.Key)
	}
	return out
}

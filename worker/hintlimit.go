package worker

import (
	"errors"
	"math"
	"time"
)

// Longest first (aerie produce --order longest-first) queues the longest
// answers at the head, which is right on equal servers and wrong for a
// server much slower than the others: whatever it takes from the head, a
// long answer at its speed can hold the whole run. So a worker that
// knows itself slow does not start a prompt whose length hint says it
// would still be generating it after the other workers could have
// answered the whole queue: hintPolicy sets that limit, and process hands
// such a prompt back at once (errSlowForHint), for a faster worker. Only
// prompts with a hint are concerned, and only while the other workers
// are heard from and known faster.

// slowFactor is how much faster per request the fastest other worker
// must stream for this one to count as slow: enough that the noise of
// the two measurements cannot make equal servers hand prompts to each
// other.
const slowFactor = 1.5

// hintHandBackDelay is how long a prompt handed back by a slow worker
// stays out of the queue: long enough that the slow worker, pulling on,
// takes the prompts after it instead, short enough that a faster worker
// gets it with its next free slot.
const hintHandBackDelay = 200 * time.Millisecond

// speedWeight is each new measurement's weight in a speed's moving mean.
const speedWeight = 0.5

// nextSpeed returns the moving mean of the tokens a second each request
// streams, given the last one (0 while unknown) and tokens streamed over
// dt by decoding requests.
func nextSpeed(speed float64, tokens int64, decoding int, dt time.Duration) float64 {
	if dt <= 0 || decoding <= 0 || tokens < 0 {
		return speed
	}
	s := float64(tokens) / dt.Seconds() / float64(decoding)
	if speed == 0 {
		return s
	}
	return speed + speedWeight*(s-speed)
}

// ownSpeed measures this worker's own speed per request since the last
// readings.
func ownSpeed(r readings, m memory) memory {
	if !m.speedAt.IsZero() {
		m.speed = nextSpeed(m.speed, r.tokens-m.speedTokens, r.decoding, r.now.Sub(m.speedAt))
	}
	m.speedTokens, m.speedAt = r.tokens, r.now
	return m
}

// hintPolicy returns the longest length hint, in tokens, that this worker
// starts for lane i: +Inf unless the fastest other worker heard from
// streams each request slowFactor times as fast as this one (own tokens
// a second). Then a hint h is started only if h tokens at own speed take
// no longer than tailMargin times the time the other workers need to
// work off the prompts left to deliver at the rate they complete them.
// Without the consumer's count of those (not read this time), their
// rate, or either speed, there is no limit.
func hintPolicy(r readings, i int, own float64) float64 {
	lr := r.lanes[i]
	if own <= 0 || lr.consumer == nil {
		return math.Inf(1)
	}
	var fastest, rate float64
	for _, p := range lr.others {
		fastest = max(fastest, p.speed)
		rate += max(p.rate, 0)
	}
	if fastest < slowFactor*own || rate <= 0 {
		return math.Inf(1)
	}
	left := float64(lr.consumer.pending) / rate // seconds
	return tailMargin * left * own
}

// errSlowForHint ends a prompt that a slow worker hands back unstarted:
// its length hint says a faster worker should answer it.
var errSlowForHint = errors.New("handed back unstarted: its length hint is too long for this worker's server, which is much slower than the run's other workers")

// setHintLimit records the limit decided for the lane.
func (l *lane) setHintLimit(limit float64) { l.hintLimit.Store(math.Float64bits(limit)) }

// slowForHint reports whether this worker should hand back, unstarted,
// a prompt of hint tokens on its attempt-th delivery: its hint is above
// the lane's limit. A prompt is never handed back on its last deliveries
// (from half the consumer's MaxDeliver on, or the tenth without one), so
// that handing back cannot use them all up.
func (l *lane) slowForHint(hint, attempt int) bool {
	limit := math.Float64frombits(l.hintLimit.Load())
	if hint <= 0 || !(float64(hint) > limit) {
		return false
	}
	last := 10
	if l.maxDeliver > 0 {
		last = l.maxDeliver / 2
	}
	return attempt < last && float64(hint) > limit
}

// ownTokens returns the completion tokens this worker has streamed, over
// every run, and how many of its requests are streaming now.
func (w *Worker) ownTokens() (tokens int64, decoding int) {
	for _, l := range w.serving() {
		tokens += l.n.tokens.Load()
	}
	w.inFlight.Range(func(_, v any) bool {
		if v.(*flight).state.Load() == flightStreaming {
			decoding++
		}
		return true
	})
	return tokens, decoding
}

// slowStartShare is how far into its hinted length a request may be and
// still be handed back by handBackSlow: early enough that little is
// thrown away. A request started before its worker knew itself slow (the
// first pull of a run takes the longest prompts at once) is caught then.
const slowStartShare = 0.25

// handBackSlow cancels, for a faster worker, l's requests whose hint is
// above the lane's limit and which have streamed less than
// slowStartShare of it (never a last delivery); it returns how many.
func (w *Worker) handBackSlow(l *lane) int {
	if math.IsInf(math.Float64frombits(l.hintLimit.Load()), 1) {
		return 0 // not slow: nothing to look at
	}
	n := 0
	w.inFlight.Range(func(_, v any) bool {
		f := v.(*flight)
		if f.lane != l || f.last || !l.slowForHint(f.hint, f.attempt) || float64(f.tokens.Load()) >= slowStartShare*float64(f.hint) {
			return true
		}
		f.mu.Lock()
		cancel := f.cancel
		f.mu.Unlock()
		if cancel == nil {
			return true
		}
		if f.state.CompareAndSwap(flightWaiting, flightHandedBack) || f.state.CompareAndSwap(flightStreaming, flightHandedBack) {
			cancel(errSlowForHint)
			n++
		}
		return true
	})
	return n
}

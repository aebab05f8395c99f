package worker

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// Longest first (aerie produce --order longest-first) queues the longest
// answers at the head, which is right on equal servers and wrong for a
// server much slower than the others: whatever it takes from the head, a
// long answer at its speed can hold the whole run. So a worker that
// knows itself slow does not start a prompt whose length hint says it
// would still be generating it after the other workers could have
// answered the whole queue, counting that a hint may fall short of the
// answer as far as the run's hints have (HintError): hintPolicy sets that
// limit. While the prompt next in the queue is above it, the worker pulls
// nothing from the run (hintHoldPolicy); a prompt above it that comes
// anyway is handed back at once (errSlowForHint), and one started before
// the worker knew itself slow is cancelled early (handBackSlow), for a
// faster worker. Only prompts with a hint are concerned, and only while
// the other workers are heard from and known faster.

// slowFactor is how much faster per request the fastest other worker
// must stream for this one to count as slow: enough that the noise of
// the two measurements cannot make equal servers hand prompts to each
// other.
const slowFactor = 1.5

// hintHandBackDelay is how long a prompt handed back by a slow worker
// stays out of the queue: none, since the worker that hands it back
// holds back from the run until its next decision (bounce), and a
// prompt handed back is one a faster worker should start at once.
const hintHandBackDelay = 0

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
// readings; the first time, before there are two readings to compare,
// from the requests streaming (r.firstSpeed).
func ownSpeed(r readings, m memory) memory {
	if !m.speedAt.IsZero() {
		m.speed = nextSpeed(m.speed, r.tokens-m.speedTokens, r.decoding, r.now.Sub(m.speedAt))
	}
	if m.speed == 0 {
		m.speed = r.firstSpeed
	}
	m.speedTokens, m.speedAt = r.tokens, r.now
	return m
}

// hintPolicy returns the longest length hint, in tokens, that this worker
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
func hintPolicy(r readings, i int, own float64) float64 {
	lr := r.lanes[i]
	if lr.consumer == nil || !slowerThanOthers(lr.others, own) {
		return math.Inf(1)
	}
	return othersLeft(lr) * own / runHintError(lr)
}

// othersLeft is the time, in seconds, that the other workers of the
// run need to work off the prompts left to deliver (0 while it cannot
// be told), the shorter of two measures:
//   - the prompts left at the rate the others complete prompts, which
//     early in a run ordered longest first is low, the first answers
//     being the longest;
//   - the prompts left, of the mean hint of those left (queueHints), at
//     the tokens a second the others stream (each one's speed times the
//     requests it holds).
func othersLeft(lr laneReading) float64 {
	var rate, tokens float64
	for _, p := range lr.others {
		rate += max(p.rate, 0)
		tokens += max(p.speed, 0) * float64(max(p.inFlight, 0))
	}
	pending := float64(lr.consumer.pending)
	left := math.Inf(1)
	if rate > 0 {
		left = pending / rate
	}
	if lr.meanHint > 0 && tokens > 0 {
		left = min(left, pending*lr.meanHint/tokens)
	}
	if math.IsInf(left, 1) {
		return 0
	}
	return left
}

// slowerThanOthers reports whether the fastest of others streams each
// request slowFactor times as fast as own tokens a second, or faster.
func slowerThanOthers(others []tailPeer, own float64) bool {
	var fastest float64
	for _, p := range others {
		fastest = max(fastest, p.speed)
	}
	return own > 0 && fastest >= slowFactor*own
}

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

// hintError is the hints' error of the answers' lengths over their hints
// in sorted, of seen answers counted: their hintErrorQuantile, or 0
// until MinHintedAnswers were counted.
func hintError(sorted []float64, seen int) float64 {
	if seen < schema.MinHintedAnswers || len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(hintErrorQuantile*float64(len(sorted))))]
}

// runHintError is the largest hints' error that this worker or another
// of the run reports, and at least minHintError.
func runHintError(lr laneReading) float64 {
	e := max(lr.hintError, minHintError)
	for _, p := range lr.others {
		e = max(e, p.hintError)
	}
	return e
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
	return l.slowFor(hint, attempt, math.Float64frombits(l.hintLimit.Load()))
}

// slowFor is slowForHint under limit.
func (l *lane) slowFor(hint, attempt int, limit float64) bool {
	if hint <= 0 || !(float64(hint) > limit) {
		return false
	}
	last := 10
	if l.maxDeliver > 0 {
		last = l.maxDeliver / 2
	}
	return attempt < last && float64(hint) > limit
}

// slowStartShare is how far into its hinted length a request may be and
// still be handed back by handBackSlow: early enough that little is
// thrown away. A request started before its worker knew itself slow (the
// first pull of a run takes the longest prompts at once) is caught then.
const slowStartShare = 0.25

// slowFlights are the requests of l among flights to hand back, for a
// faster worker, under the hint limit just decided: those whose hint is
// above it and which had streamed less than slowStartShare of it, sent
// and not yet handed back (never a last delivery).
func slowFlights(flights []flightView, l *lane, limit float64) []*flight {
	if math.IsInf(limit, 1) {
		return nil // not slow: nothing to look at
	}
	var out []*flight
	for _, fv := range flights {
		f := fv.f
		if fv.lane != l || f.last || !l.slowFor(f.hint, f.attempt, limit) || float64(fv.tokens) >= slowStartShare*float64(f.hint) {
			continue
		}
		if fv.sent.IsZero() || fv.state != flightWaiting && fv.state != flightStreaming {
			continue
		}
		out = append(out, f)
	}
	return out
}

// addHinted counts, for the hints' error, an answer of tokens to a
// prompt whose length hint was hint; a prompt without one (0) is not
// counted. An answer cut at max_tokens counts its length so far: a
// hint's error is known at least that large.
func (l *lane) addHinted(hint, tokens int) {
	if hint > 0 {
		l.hintErr.add(float64(tokens) / float64(hint))
	}
}

// hintlessPeekEvery is how many decisions apart a slow worker reads the
// hints left in a run's queue once a reading found none: a run without
// hints costs it a few reads a minute, not queueSamples a decision.
const hintlessPeekEvery = 30

// queueSamples is how many prompts left in a run's queue queueHints
// reads: enough for their mean hint to within about a third on a heavy
// tail, few enough to read every decision.
const queueSamples = 8

// queueHints reads the length hints of prompts that consumer c has still
// to deliver: next is the hint of the one it delivers next, redeliveries
// aside (the first message after the last delivered on its filter
// subject), and mean the mean hint of queueSamples prompts spread evenly
// from it over the stream sequences of those left (as if the run's
// prompts were stored together), as far as they have hints. It returns
// -1 and 0 when it cannot tell (no single filter, nothing left, reads
// that fail), and a next of 0 for a prompt without a hint.
func (w *Worker) queueHints(ctx context.Context, c *consumerReading) (next int, mean float64) {
	if c.filter == "" || c.pending == 0 || w.prompts == nil {
		return -1, 0
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, first, err := w.promptAtOrAfter(gctx, c.delivered+1, c.filter)
	if err != nil {
		return -1, 0
	}
	next = p.LengthHint
	var sum, n float64
	for k := range uint64(queueSamples) {
		if k > 0 {
			if c.pending < queueSamples {
				break
			}
			if p, _, err = w.promptAtOrAfter(gctx, first+k*c.pending/queueSamples, c.filter); err != nil {
				break // past the run's last prompt, or a read that fails
			}
		}
		if p.LengthHint > 0 {
			sum += float64(p.LengthHint)
			n++
		}
	}
	if n > 0 {
		mean = sum / n
	}
	return next, mean
}

// promptAtOrAfter reads the first prompt at or after stream sequence seq
// on subject filter, and returns it with its sequence.
func (w *Worker) promptAtOrAfter(ctx context.Context, seq uint64, filter string) (*schema.Prompt, uint64, error) {
	raw, err := w.prompts.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
	if err != nil {
		return nil, 0, err
	}
	if err := schema.CheckSchemaHeader(schema.KindPrompt, raw.Header.Get(schema.HeaderSchema)); err != nil {
		return nil, 0, err
	}
	p, err := schema.DecodePrompt(raw.Data)
	return p, raw.Sequence, err
}

// hintHoldPolicy reports whether to pull nothing from a run whose next
// prompt has length hint next (-1: not known) under the lane's limit:
// while it is above, a pull would only take prompts to hand back. In a
// run ordered longest first, every prompt after it is shorter, so the
// worker pulls again once the head of the queue comes within its limit.
// When the next prompt is not known (every prompt was delivered: what
// comes next are those handed back), it holds if it handed back a prompt
// for its hint since the last decision (bounced), so that it pulls at
// most once a decision what it will only hand back.
func hintHoldPolicy(limit float64, next int, bounced bool) bool {
	switch {
	case math.IsInf(limit, 1):
		return false
	case next < 0:
		return bounced
	}
	return next > 0 && float64(next) > limit
}

// bounce records that a prompt was handed back for its hint: the lane
// pulls nothing more until the next decision (hintHoldPolicy), since the
// prompts that come next, in a run ordered longest first, are as long.
func (l *lane) bounce() {
	l.hintBounced.Store(true)
	l.hintHold.Store(true)
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

package throughput

import (
	"math"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// maxInFlightTokens bounds how many per-request token counts are kept from
// one heartbeat. A worker holds a few hundred requests; a heartbeat listing
// more than this is malformed, and the rest count as just started.
const maxInFlightTokens = 1 << 16

// sample is one heartbeat of one worker, as the rate computations use it.
type sample struct {
	at time.Time
	// tokens counts the tokens streamed since the worker was first heard,
	// summed over counter resets, so it never decreases.
	tokens float64
	// decoding is the number of requests streaming tokens at that moment
	// (in flight and past their first token).
	decoding int
	// started is the requests sent since the previous sample: those
	// that ended (completed, dead-lettered or handed back) plus the
	// change in those in flight. −1 when not known: the first sample of
	// a series, or after a counter reset.
	started float64
	// full is set when the worker's window was full (within a twentieth),
	// its own requests and other runs' together: the batch of the steady
	// state.
	full bool
}

// worker is what is known about one worker process: its latest heartbeat
// and enough of its history to measure rates.
type worker struct {
	raw int64 // the last TokensStreamed counter seen
	// backend is where the worker's requests go (Heartbeat.Backend):
	// workers of one backend share its steps (see relief.go).
	backend   string
	ended     int64 // the last Completed+DeadLettered+Retried seen
	samples   []sample
	lastHeard time.Time

	window, inFlight int
	// others is the worker's latest Heartbeat.OtherRuns: prompts it holds
	// for other runs, which take part of its window.
	others int
	// requests is how many requests the worker is generating: the
	// requests it lists in InFlightTokens, or InFlight when it lists none.
	// With --turns all a worker also holds conversations between two
	// turns, which InFlight counts and no request stands for.
	requests       int
	inFlightTokens []float64
	// flights is the requests listed, with their own speed where the
	// heartbeat gives their age (Heartbeat.InFlightMillis).
	flights []flight
	// interim is the worker's latest Heartbeat.InterimTurns: a gauge.
	interim int
	// stopping is set when the latest heartbeat said the worker stops: it
	// hands its prompts back, and nothing it held is stranded.
	stopping bool
}

// observe records a heartbeat. Heartbeats older than (or as old as) the
// newest one already seen are ignored: they carry nothing newer, and
// applying one would look like a counter reset. (A worker whose clock
// steps back is therefore ignored until its clock catches up.) keep is
// how much history the rates need.
//
// The first heartbeat of a worker sets its baseline: tokens it streamed
// before are not counted, because they may have been streamed long before
// this estimator started. A counter that goes down means the process
// restarted under the same name; the new counter becomes the baseline of a
// new series, so a reset can neither subtract tokens nor add a whole
// process's history at once. Either way at most one heartbeat interval of
// one worker's tokens goes uncounted.
func (w *worker) observe(hb schema.Heartbeat, keep time.Duration) {
	raw := max(hb.TokensStreamed, 0)
	ended := max(hb.Completed, 0) + max(hb.DeadLettered, 0) + max(hb.Retried, 0)
	tokens, started := 0.0, -1.0
	if n := len(w.samples); n > 0 {
		prev := w.samples[n-1]
		if !hb.Time.After(prev.at) {
			return
		}
		tokens = prev.tokens
		if raw >= w.raw {
			tokens += float64(raw - w.raw)
		}
		if ended >= w.ended {
			requests := len(hb.InFlightTokens)
			if requests == 0 {
				requests = hb.InFlight
			}
			started = math.Max(float64(ended-w.ended)+float64(requests-w.requests), 0)
		}
	}
	w.raw = raw
	w.ended = ended
	w.lastHeard = hb.Time
	w.window = max(hb.Window, 0)
	w.backend = hb.Backend
	w.others = min(max(hb.OtherRuns, 0), w.window)
	w.inFlight = max(hb.InFlight, 0)
	w.interim = max(hb.InterimTurns, 0)
	w.stopping = hb.Paused && hb.PausedReason == schema.PausedStopping
	w.inFlightTokens = w.inFlightTokens[:0]
	w.flights = w.flights[:0]
	decoding := 0
	aged := len(hb.InFlightMillis) == len(hb.InFlightTokens)
	for i, c := range hb.InFlightTokens {
		if i >= maxInFlightTokens {
			break
		}
		c = max(c, 0)
		if c > 0 {
			decoding++
		}
		tokens := float64(clampLength(int64(c)))
		w.inFlightTokens = append(w.inFlightTokens, tokens)
		f := flight{tokens: tokens}
		if aged && hb.InFlightMillis[i] > 0 {
			f.age = float64(hb.InFlightMillis[i]) / 1000
			if tokens >= ownSpeedTokens {
				f.speed = tokens / f.age
			}
		}
		w.flights = append(w.flights, f)
	}
	w.requests = len(hb.InFlightTokens)
	if len(hb.InFlightTokens) == 0 {
		// No per-request detail: assume everything in flight is streaming.
		decoding = w.inFlight
		w.requests = w.inFlight
	}
	full := hb.Window > 0 && 20*(max(hb.InFlight, 0)+w.others) >= 19*hb.Window
	w.samples = append(w.samples, sample{at: hb.Time, tokens: tokens, decoding: decoding, started: started, full: full})
	w.trim(keep)
}

// trim drops samples older than keep before the newest, keeping the newest
// of those so that a span of exactly keep can still be measured.
func (w *worker) trim(keep time.Duration) {
	n := len(w.samples)
	if n == 0 {
		return
	}
	cut := w.samples[n-1].at.Add(-keep)
	i := 0
	for i+1 < n && !w.samples[i+1].at.After(cut) {
		i++
	}
	if i > 0 {
		w.samples = append(w.samples[:0], w.samples[i:]...)
	}
}

// streamed returns the tokens counted for this worker so far.
func (w *worker) streamed() float64 {
	if len(w.samples) == 0 {
		return 0
	}
	return w.samples[len(w.samples)-1].tokens
}

// spanStats is what a worker streamed over a stretch of its own recent
// history.
type spanStats struct {
	tokens  float64 // tokens streamed
	seconds float64 // time covered
	seqSecs float64 // sequence-seconds spent decoding
}

// over measures the last span of the worker's history, on the worker's own
// clock: from its newest sample back to the newest sample at least span
// older (or its oldest sample, when its history is shorter). Measuring
// each worker between its own heartbeats makes the sum over workers immune
// to clock offsets between machines and to where in the heartbeat cycle
// the question is asked.
func (w *worker) over(span time.Duration) spanStats {
	return w.overIntervals(span, false)
}

// overIdle is over counting only the intervals in which no request was
// sent: the speed without the prefill of new prompts (see relief.go).
func (w *worker) overIdle(span time.Duration) spanStats {
	return w.overIntervals(span, true)
}

func (w *worker) overIntervals(span time.Duration, idle bool) spanStats {
	n := len(w.samples)
	if n < 2 {
		return spanStats{}
	}
	last := w.samples[n-1]
	cut := last.at.Add(-span)
	i := n - 2
	for i > 0 && w.samples[i].at.After(cut) {
		i--
	}
	var st spanStats
	for k := i + 1; k < n; k++ {
		a, b := w.samples[k-1], w.samples[k]
		if idle && b.started != 0 {
			continue
		}
		dt := b.at.Sub(a.at).Seconds()
		st.seconds += dt
		st.tokens += b.tokens - a.tokens
		st.seqSecs += dt * float64(a.decoding+b.decoding) / 2
	}
	return st
}

// completionCounter counts completions in time slots covering the last
// window, so memory stays constant at any completion rate. A slot is
// 1/completionSlots of the window (one second for the default minute),
// which is the resolution of the window's edge. Each slot remembers which
// interval it counts, so a completion or a snapshot dated wrongly (a clock
// step, a late call) affects at most its own slot and never the others.
type completionCounter struct {
	origin time.Time
	width  time.Duration
	slots  []completionSlot
}

type completionSlot struct {
	index int64 // interval since origin, in widths
	count int64
}

// completionSlots is the number of slots in the window.
const completionSlots = 60

func newCompletionCounter(origin time.Time, window time.Duration) completionCounter {
	width := max(window/completionSlots, time.Millisecond)
	slots := make([]completionSlot, completionSlots)
	for i := range slots {
		slots[i].index = -1
	}
	return completionCounter{origin: origin, width: width, slots: slots}
}

// index returns the interval holding t; times before origin count as the
// first.
func (c *completionCounter) index(t time.Time) int64 {
	d := t.Sub(c.origin)
	if d < 0 {
		return 0
	}
	return int64(d / c.width)
}

// add counts one completion at t. A slot holding an older interval is
// reused; one holding a newer interval keeps it, and the completion shows
// only in the overall rate.
func (c *completionCounter) add(t time.Time) {
	idx := c.index(t)
	s := &c.slots[idx%int64(len(c.slots))]
	switch {
	case s.index == idx:
		s.count++
	case s.index < idx:
		*s = completionSlot{index: idx, count: 1}
	}
}

// rate returns completions per second over the window ending at now,
// dividing by the time its slots cover (shorter than the window early in
// the run).
func (c *completionCounter) rate(now time.Time) float64 {
	idx := c.index(now)
	first := max(idx-int64(len(c.slots))+1, 0)
	var count int64
	for _, s := range c.slots {
		if s.index >= first && s.index <= idx {
			count += s.count
		}
	}
	secs := now.Sub(c.origin.Add(time.Duration(first) * c.width)).Seconds()
	if !(secs > 0) {
		return 0
	}
	return float64(count) / secs
}

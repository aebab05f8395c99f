package worker

import (
	"fmt"
	"math"
	"time"
)

// A batch run on servers that also take interactive requests must not
// take their slots (Config.YieldToServing). Its requests carry vLLM's
// priority (Config.BatchPriority, above the interactive default of 0),
// so that a server run with --scheduling-policy priority admits
// interactive requests first and, short of KV cache, preempts batch
// ones. What priority cannot do is make room in a batch that batch
// requests fill: an interactive request then waits for one of them to
// finish. So every poll the worker reads the server's load and its
// time-to-first-token histogram, and caps its window (yieldPolicy)
// while requests that are not its own wait in the server, or while the
// server's TTFT p95 over the last minute is above the SLO: below the
// requests it has there by what waits (at least the allowance a server
// keeps queued), at most halving per poll. A cap takes effect as the
// worker's requests finish, not at once: it is lowered again only once
// the worker's requests have come down to it, and for the TTFT only on
// first tokens that came after it was lowered (the histogram's minute
// still holds those from before). Once neither holds for
// yieldClearPolls polls the cap grows back a fiftieth a poll (at least
// one slot), and goes once it no longer binds.
//
// Waiting for interactive requests to queue before yielding means some
// of them queue. So while requests that are not the worker's have been
// in the server within the last minute, and the server's batch is known
// (the most requests seen running while some waited), the cap also
// stays at or below that batch less the others' requests and the
// allowance: room for them to be admitted at once.

// Tunables of yieldPolicy.
const (
	// ttftSpan is the span of the TTFT p95 the SLO is held against.
	ttftSpan = time.Minute
	// ttftMinSamples is the fewest first tokens in the span for its p95
	// to count: a handful of requests says little.
	ttftMinSamples = 20
	// yieldClearPolls is how many polls in a row must find nothing to
	// yield to before the cap grows.
	yieldClearPolls = 3
	// yieldGrowth is the share the cap grows by a poll once clear.
	yieldGrowth = 1.0 / 50
	// yieldReleaseAfter is how many clear polls release the cap whatever
	// its size.
	yieldReleaseAfter = 120
)

// yieldMemory is what the yield policy remembers: the TTFT histograms of
// the last span, the cap (0: not yielding) and the polls in a row with
// nothing to yield to.
type yieldMemory struct {
	history []ttftReading
	cap     int
	clear   int
	// lowered is when the cap was last lowered: the TTFT p95 counts
	// only first tokens from then on.
	lowered time.Time
	// batch is the server's batch as far as known: the most requests
	// seen running while some waited (0 while unknown); othersSeen is
	// when requests not the worker's were last seen in the server.
	batch      float64
	othersSeen time.Time
}

type ttftReading struct {
	at      time.Time
	buckets []bucket
}

// yieldDecision is what the yield policy decides: the cap on the window
// (0: none), and why it was set or lowered now ("" when it was not).
type yieldDecision struct {
	cap int
	why string
	// p95 is the server's TTFT p95 over the span, -1 while unknown.
	p95 time.Duration
}

// yieldPolicy caps the window for serving traffic (see above).
func yieldPolicy(p policy, r readings, m yieldMemory) (yieldDecision, yieldMemory) {
	d := yieldDecision{cap: m.cap, p95: -1}
	if !p.yield || r.load == nil {
		return d, m
	}
	load := *r.load
	if load.TTFT != nil {
		m.history = append(m.history, ttftReading{at: r.now, buckets: load.TTFT})
		// Keep the newest reading at or before the span's start as the
		// baseline, and everything after it.
		cut := 0
		for i, h := range m.history {
			if !h.at.After(r.now.Add(-ttftSpan)) {
				cut = i
			}
		}
		m.history = m.history[cut:]
		from := 0
		for i, h := range m.history {
			if h.at.Before(m.lowered) {
				from = min(i+1, len(m.history)-1)
			}
		}
		if len(m.history)-from > 1 {
			d.p95 = histogramQuantile(0.95, m.history[from].buckets, m.history[len(m.history)-1].buckets, ttftMinSamples)
		}
	}
	ours := float64(r.generating)
	others := max(0, load.Running+load.Waiting-ours)
	if load.Waiting > 0 {
		m.batch = max(m.batch, load.Running)
	}
	if others > 0 {
		m.othersSeen = r.now
	}
	// room is the most the worker may have in the server while others
	// use it: 0 when they are not there or the batch is not known.
	room := 0
	if !m.othersSeen.IsZero() && r.now.Sub(m.othersSeen) < ttftSpan && m.batch > 0 {
		room = max(1, int(m.batch-others-allowance(m.batch)))
	}
	var why string
	switch {
	case load.Waiting > 0 && others > 0:
		why = fmt.Sprintf("%.0f requests wait in the server beside %.0f that are not this worker's", load.Waiting, others)
	case p.ttftSLO > 0 && d.p95 > p.ttftSLO:
		why = fmt.Sprintf("the server's time to first token p95 is %v, above the SLO of %v", d.p95.Round(time.Millisecond), p.ttftSLO)
	}
	if why != "" {
		m.clear = 0
		if m.cap > 0 && r.generating > m.cap {
			return d, m // the cap lowered before is still taking effect
		}
		base := r.size
		if m.cap > 0 {
			base = min(base, m.cap)
		}
		cut := int(math.Ceil(max(load.Waiting, allowance(load.Running))))
		next := max(1, min(base, r.generating)-cut, base/2)
		if room > 0 {
			next = max(min(next, room), base/2)
		}
		m.cap, m.lowered = next, r.now
		d.cap, d.why = next, why
		return d, m
	}
	if room > 0 && (m.cap == 0 && r.size > room || m.cap > room) {
		// Others use the server: leave them room before they queue.
		base := r.size
		if m.cap > 0 {
			base = min(base, m.cap)
		}
		m.cap, m.clear = max(room, base/2), 0
		d.cap, d.why = m.cap, fmt.Sprintf("room for %.0f requests that are not this worker's in a batch of %.0f", others, m.batch)
		return d, m
	}
	if m.cap == 0 {
		return d, m
	}
	m.clear++
	if m.clear < yieldClearPolls {
		return d, m
	}
	m.cap += max(1, int(float64(m.cap)*yieldGrowth))
	if room > 0 {
		m.cap = min(m.cap, room)
	}
	limit := p.window
	if p.auto {
		limit = p.maxWindow
	}
	if m.cap >= limit || m.clear >= yieldReleaseAfter {
		m.cap, m.clear = 0, 0
	}
	d.cap = m.cap
	return d, m
}

// histogramQuantile is the q-quantile of the observations between two
// readings of a cumulative histogram, interpolated linearly within its
// bucket as Prometheus's histogram_quantile does; -1 when fewer than
// least were observed, or the readings do not line up (a server
// restarted in between).
func histogramQuantile(q float64, from, to []bucket, least int) time.Duration {
	if len(from) != len(to) || len(to) == 0 {
		return -1
	}
	total := to[len(to)-1].count - from[len(from)-1].count
	if total < float64(least) || total <= 0 {
		return -1
	}
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for i := range to {
		if to[i].le != from[i].le {
			return -1
		}
		c := to[i].count - from[i].count
		if c >= rank {
			if math.IsInf(to[i].le, 1) {
				return time.Duration(prevLE * float64(time.Second))
			}
			frac := 0.0
			if c > prevCount {
				frac = (rank - prevCount) / (c - prevCount)
			}
			return time.Duration((prevLE + frac*(to[i].le-prevLE)) * float64(time.Second))
		}
		prevLE, prevCount = to[i].le, c
	}
	return time.Duration(prevLE * float64(time.Second))
}

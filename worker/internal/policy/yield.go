package policy

import (
	"fmt"
	"math"
	"slices"
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
// time-to-first-token histogram, and caps its window (YieldPolicy)
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

// YieldMemory is what the yield policy remembers: the TTFT histograms of
// the last span, the cap (0: not yielding) and the polls in a row with
// nothing to yield to.
type YieldMemory struct {
	History []TTFTReading
	Cap     int
	Clear   int
	// Lowered is when the cap was last lowered: the TTFT p95 counts
	// only first tokens from then on.
	Lowered time.Time
	// Batch is the server's batch as far as known: the most requests
	// seen running while some waited (0 while unknown); OthersSeen is
	// when requests not the worker's were last seen in the server.
	Batch      float64
	OthersSeen time.Time
}

// TTFTReading is a reading of the server's TTFT histogram.
type TTFTReading struct {
	At      time.Time
	Buckets []Bucket
}

// YieldDecision is what the yield policy decides: the cap on the window
// (0: none), and why it was set or lowered now ("" when it was not).
type YieldDecision struct {
	Cap int
	Why string
	// P95 is the server's TTFT p95 over the span, -1 while unknown.
	P95 time.Duration
}

// YieldPolicy caps the window for serving traffic (see above).
func YieldPolicy(c Config, s Snapshot, m YieldMemory) (YieldDecision, YieldMemory) {
	d := YieldDecision{Cap: m.Cap, P95: -1}
	if !c.Yield || s.Load.Load == nil {
		return d, m
	}
	load := *s.Load.Load
	if load.TTFT != nil {
		m.History = append(slices.Clone(m.History), TTFTReading{At: s.Now, Buckets: load.TTFT})
		// Keep the newest reading at or before the span's start as the
		// baseline, and everything after it.
		cut := 0
		for i, h := range m.History {
			if !h.At.After(s.Now.Add(-ttftSpan)) {
				cut = i
			}
		}
		m.History = m.History[cut:]
		from := 0
		for i, h := range m.History {
			if h.At.Before(m.Lowered) {
				from = min(i+1, len(m.History)-1)
			}
		}
		if len(m.History)-from > 1 {
			d.P95 = histogramQuantile(0.95, m.History[from].Buckets, m.History[len(m.History)-1].Buckets, ttftMinSamples)
		}
	}
	ours := float64(s.Generating)
	others := max(0, load.Running+load.Waiting-ours)
	if load.Waiting > 0 {
		m.Batch = max(m.Batch, load.Running)
	}
	if others > 0 {
		m.OthersSeen = s.Now
	}
	// room is the most the worker may have in the server while others
	// use it: 0 when they are not there or the batch is not known.
	room := 0
	if !m.OthersSeen.IsZero() && s.Now.Sub(m.OthersSeen) < ttftSpan && m.Batch > 0 {
		room = max(1, int(m.Batch-others-allowance(m.Batch)))
	}
	var why string
	switch {
	case load.Waiting > 0 && others > 0:
		why = fmt.Sprintf("%.0f requests wait in the server beside %.0f that are not this worker's", load.Waiting, others)
	case c.TTFTSLO > 0 && d.P95 > c.TTFTSLO:
		why = fmt.Sprintf("the server's time to first token p95 is %v, above the SLO of %v", d.P95.Round(time.Millisecond), c.TTFTSLO)
	}
	if why != "" {
		m.Clear = 0
		if m.Cap > 0 && s.Generating > m.Cap {
			return d, m // the cap lowered before is still taking effect
		}
		base := s.Size
		if m.Cap > 0 {
			base = min(base, m.Cap)
		}
		cut := int(math.Ceil(max(load.Waiting, allowance(load.Running))))
		next := max(1, min(base, s.Generating)-cut, base/2)
		if room > 0 {
			next = max(min(next, room), base/2)
		}
		m.Cap, m.Lowered = next, s.Now
		d.Cap, d.Why = next, why
		return d, m
	}
	if room > 0 && (m.Cap == 0 && s.Size > room || m.Cap > room) {
		// Others use the server: leave them room before they queue.
		base := s.Size
		if m.Cap > 0 {
			base = min(base, m.Cap)
		}
		m.Cap, m.Clear = max(room, base/2), 0
		d.Cap, d.Why = m.Cap, fmt.Sprintf("room for %.0f requests that are not this worker's in a batch of %.0f", others, m.Batch)
		return d, m
	}
	if m.Cap == 0 {
		return d, m
	}
	m.Clear++
	if m.Clear < yieldClearPolls {
		return d, m
	}
	m.Cap += max(1, int(float64(m.Cap)*yieldGrowth))
	if room > 0 {
		m.Cap = min(m.Cap, room)
	}
	limit := c.Window
	if c.Auto {
		limit = c.MaxWindow
	}
	if m.Cap >= limit || m.Clear >= yieldReleaseAfter {
		m.Cap, m.Clear = 0, 0
	}
	d.Cap = m.Cap
	return d, m
}

// histogramQuantile is the q-quantile of the observations between two
// readings of a cumulative histogram, interpolated linearly within its
// bucket as Prometheus's histogram_quantile does; -1 when fewer than
// least were observed, or the readings do not line up (a server
// restarted in between).
func histogramQuantile(q float64, from, to []Bucket, least int) time.Duration {
	if len(from) != len(to) || len(to) == 0 {
		return -1
	}
	total := to[len(to)-1].Count - from[len(from)-1].Count
	if total < float64(least) || total <= 0 {
		return -1
	}
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for i := range to {
		if to[i].LE != from[i].LE {
			return -1
		}
		c := to[i].Count - from[i].Count
		if c >= rank {
			if math.IsInf(to[i].LE, 1) {
				return time.Duration(prevLE * float64(time.Second))
			}
			frac := 0.0
			if c > prevCount {
				frac = (rank - prevCount) / (c - prevCount)
			}
			return time.Duration((prevLE + frac*(to[i].LE-prevLE)) * float64(time.Second))
		}
		prevLE, prevCount = to[i].LE, c
	}
	return time.Duration(prevLE * float64(time.Second))
}

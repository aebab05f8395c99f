package throughput

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// The prefill relief is how much faster the requests in flight decode
// once no new prompts arrive, at the same batch: the factor the drain
// gains before the batch even begins to empty.
//
// A step of the engine decodes one token of every running request and,
// with chunked prefill, also reads part of the prompts of the requests
// just sent. In steady state every answer that ends is replaced by a new
// prompt, so the prefill's share of a step is set by how many answers
// end per second: short answers to long prompts put it at most of the
// step. Once the last prompt is handed out there is none, and every
// request left speeds up at once. With answers of 300 tokens on average
// after prompts of 1,000 the simulated engine's steps are two thirds
// prefill, and the last requests decoded 4.6 times as fast as in the
// full batch; with the reference run's answers of 2,200 tokens about a
// fifth, and 2.1 times.
//
// The relief is measured, not assumed: a step costs
//
//	τ = A + c·p     (A the decode part, p prompt tokens read per step)
//
// and p = π·τ for π prompt tokens per second, so a request's speed is
// 1/τ = (1 − c·π)/A: linear in the rate at which prompts arrive, with
// the speed at no arrivals, 1/A, where that line meets zero. The rate of
// arrivals wanders from one heartbeat to the next (answers end at
// random), and so does the speed with it. Fitting the one to the other
// over the heartbeats of the steady state gives the speed at no
// arrivals, and the relief is that over the mean speed. Prompts are
// counted, not their tokens: the worker knows a prompt's tokens only
// when its answer ends, and a prompt's length averages out over the
// dozens a heartbeat interval sees.
//
// A backend whose requests do not slow with arrivals (each request at its
// own speed) gives a flat line and a relief of 1: nothing is assumed that
// the run does not show. A prefill that spills into the next interval
// blurs the arrivals and flattens the line, which errs towards no relief.

// minReliefIntervals is how many heartbeat intervals of a backend (of
// its worker heard most) the fit needs: under that it has too few
// arrivals to tell a slope from noise.
const minReliefIntervals = 10

// maxRelief bounds the relief: a step that is nine tenths prefill.
const maxRelief = 10

// relief is one backend's fit: its relief and the weight of its
// measurement (sequence-seconds, as for the speed).
type relief struct {
	factor, weight float64
}

// reliefSince fits the intervals from since on of the workers of one
// backend (see above), those that begin and end with every window full:
// as the last prompts go out the batch shrinks, its requests speed up for
// that reason too, and counted here they would pass for relief. Workers
// that share a backend are fitted together, on the intervals of the one
// heard most, each other's tokens and prompts taken over the same span
// (see span): a worker's own prompts are only part of what its backend
// prefills, and fitted alone, two workers of one server each saw about
// no relief (1.08 where it was 2.9). The workers' heartbeats are dated
// by their own clocks, which for workers of one backend are usually one
// host's; an offset between them blurs the fit towards too little
// relief, as a prefill that spills into the next interval does.
// It returns the fit at one standard error below its estimate, so that a
// short noisy history does not promise a drain faster than it shows, and
// never below 1. ok is false when the history is too short or the
// arrivals did not vary.
func reliefSince(group []*worker, since time.Time) (relief, bool) {
	if len(group) == 0 {
		return relief{}, false
	}
	grid := slices.MaxFunc(group, func(a, b *worker) int { return cmp.Compare(len(a.samples), len(b.samples)) })
	var xs, ys, ws []float64
	for k := 1; k < len(grid.samples); k++ {
		t0, t1 := grid.samples[k-1].at, grid.samples[k].at
		if t0.Before(since) {
			continue
		}
		var sum spanSums
		ok := true
		for _, w := range group {
			s, covered := w.span(t0, t1)
			if !covered {
				ok = false
				break
			}
			sum.tokens += s.tokens
			sum.sent += s.sent
			sum.seq += s.seq
		}
		dt := t1.Sub(t0).Seconds()
		if !ok || !(dt > 0) || !(sum.seq > 0) {
			continue
		}
		xs = append(xs, sum.sent/dt)
		ys = append(ys, sum.tokens/sum.seq)
		ws = append(ws, sum.seq)
	}
	n := len(xs)
	if n < minReliefIntervals {
		return relief{}, false
	}
	// Weighted least squares of speed on arrivals.
	var sw, mx, my float64
	for i := range xs {
		sw += ws[i]
		mx += ws[i] * xs[i]
		my += ws[i] * ys[i]
	}
	mx, my = mx/sw, my/sw
	var sxx, sxy, syy float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxx += ws[i] * dx * dx
		sxy += ws[i] * dx * dy
		syy += ws[i] * dy * dy
	}
	if !(sxx > 0) || !(my > 0) {
		return relief{}, false
	}
	slope := sxy / sxx
	intercept := my - slope*mx
	// The residual variance per unit weight, and the intercept's standard
	// error with the weights taken as relative.
	resid := math.Max(syy-slope*sxy, 0) / float64(n-2)
	se := math.Sqrt(resid * (1/sw + mx*mx/sxx))
	factor := (intercept - se) / my
	if math.IsNaN(factor) {
		return relief{}, false
	}
	return relief{factor: min(max(factor, 1), maxRelief), weight: sw}, true
}

// spanSums is what a worker did over a span of time: tokens streamed,
// prompts sent and sequence-seconds decoding.
type spanSums struct {
	tokens, sent, seq float64
}

// span returns what the worker did from t0 to t1, its intervals that
// overlap the span counted pro rata. covered is false unless its
// heartbeats cover the whole span, every one of those intervals has a
// known number of prompts sent, and its window was full at each of their
// ends.
func (w *worker) span(t0, t1 time.Time) (spanSums, bool) {
	var out spanSums
	n := len(w.samples)
	if n < 2 || t0.Before(w.samples[0].at) || t1.After(w.samples[n-1].at) {
		return out, false
	}
	k := max(sort.Search(n, func(i int) bool { return w.samples[i].at.After(t0) }), 1)
	for ; k < n; k++ {
		a, b := w.samples[k-1], w.samples[k]
		if !a.at.Before(t1) {
			break
		}
		if b.started < 0 || !a.full || !b.full {
			return out, false
		}
		// The part of the interval inside the span, in seconds from t0.
		dt := b.at.Sub(a.at).Seconds()
		from, to := max(a.at.Sub(t0).Seconds(), 0), min(b.at.Sub(t0).Seconds(), t1.Sub(t0).Seconds())
		share := (to - from) / dt
		if !(dt > 0) || !(share > 0) {
			continue
		}
		out.tokens += share * (b.tokens - a.tokens)
		out.sent += share * b.started
		out.seq += share * dt * float64(a.decoding+b.decoding) / 2
	}
	return out, true
}

// fleetRelief is the relief of the workers, fitted by backend (workers
// that do not name theirs each alone) and weighted by how much each
// decodes; ok is false when none can be fitted.
func fleetRelief(ws []*worker, since time.Time) (float64, bool) {
	groups := map[string][]*worker{}
	var keys []string
	for i, w := range ws {
		key := "backend " + w.backend
		if w.backend == "" {
			key = fmt.Sprintf("worker %d", i)
		}
		if _, seen := groups[key]; !seen {
			keys = append(keys, key)
		}
		groups[key] = append(groups[key], w)
	}
	var sum, weight float64
	for _, key := range keys {
		if r, ok := reliefSince(groups[key], since); ok {
			sum += r.factor * r.weight
			weight += r.weight
		}
	}
	if !(weight > 0) {
		return 0, false
	}
	return sum / weight, true
}

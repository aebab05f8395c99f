package throughput

import (
	"math"
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

// minReliefIntervals is how many heartbeat intervals of one worker the
// fit needs: under that it has too few arrivals to tell a slope from
// noise.
const minReliefIntervals = 10

// maxRelief bounds the relief: a step that is nine tenths prefill.
const maxRelief = 10

// relief is one worker's fit: its relief and the weight of its
// measurement (sequence-seconds, as for the speed).
type relief struct {
	factor, weight float64
}

// reliefSince fits the worker's intervals from since on (see above),
// those that begin and end with its window full: as the last prompts go
// out the batch shrinks, its requests speed up for that reason too, and
// counted here they would pass for relief.
// It returns the fit at one standard error below its estimate, so that a
// short noisy history does not promise a drain faster than it shows, and
// never below 1. ok is false when the history is too short or the
// arrivals did not vary.
func (w *worker) reliefSince(since time.Time) (relief, bool) {
	var xs, ys, ws []float64
	for k := 1; k < len(w.samples); k++ {
		a, b := w.samples[k-1], w.samples[k]
		if a.at.Before(since) || b.started < 0 || !a.full || !b.full {
			continue
		}
		dt := b.at.Sub(a.at).Seconds()
		seq := dt * float64(a.decoding+b.decoding) / 2
		if !(dt > 0) || !(seq > 0) {
			continue
		}
		xs = append(xs, b.started/dt)
		ys = append(ys, (b.tokens-a.tokens)/seq)
		ws = append(ws, seq)
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

// fleetRelief is the relief of the workers, weighted by how much each
// decodes; ok is false when none can be fitted.
func fleetRelief(ws []*worker, since time.Time) (float64, bool) {
	var sum, weight float64
	for _, w := range ws {
		if r, ok := w.reliefSince(since); ok {
			sum += r.factor * r.weight
			weight += r.weight
		}
	}
	if !(weight > 0) {
		return 0, false
	}
	return sum / weight, true
}

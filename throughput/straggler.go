package throughput

import (
	"math"
	"slices"

	"github.com/aerie-dev/aerie/schema"
)

// ownSpeedTokens is how many tokens a request must have streamed before
// its own speed (tokens over the time since it was sent) stands for it:
// before that, the time it waited for its prefill weighs too much, and
// the batch's per-request speed is taken instead.
const ownSpeedTokens = 256

// stragglerPoints is the number of start times at which the not yet
// started answers are integrated: they go out evenly over the busy time.
// stragglerGrid is the number of points in time of the integral of the
// last end. Both are small because the estimate is computed at every
// event and for each end of the band; more points moved the study's
// figures by less than a percent.
const (
	stragglerPoints = 8
	stragglerGrid   = 64
)

// flight is one request in flight as the stragglers' end sees it.
type flight struct {
	tokens float64 // streamed so far
	speed  float64 // its own tokens/s; 0: not known yet
	age    float64 // seconds since it was sent, at the heartbeat; 0: not known
}

// stragglers is the end of the run as its longest answers set it: the
// last of the answers not yet finished to end, each at its own pace.
//
// The bulk's ETA (eta) counts the work and ends it with the drain of the
// requests in flight when the last one is handed out. That misses the
// case where the run's end is set by one answer far longer than the rest:
// with lengths lognormal at σ 1.2 and a mean of 300 tokens, the longest
// of 6,000 answers is expected near 13,000 tokens, and if it starts late
// the run ends minutes after the bulk. The longest of the answers still to
// come depends on how many are left, not only on the batch in flight.
//
// Each answer not yet started goes out at a time spread evenly over the
// busy time (the time until the last one is handed out) and then decodes
// at the batch's per-request speed until then, at alone after; an answer
// in flight, from the tokens it has, at its own speed (see flight). The
// run's end is the last of all those ends:
//
//	P(end <= t) = Π_in flight P(L <= c + tokens by t | L > c) × q(t)^m
//	q(t) = (1/B) ∫_0^B P(L <= tokens from s to t) ds
//
// with m answers not yet started and B the busy time. Its mean is the
// point estimate and its 5th and 95th percentiles the band, so the band
// carries the randomness of the longest answer still to come, which is
// what sets such a run's end.
type stragglers struct {
	sv      lengthSurv
	queued  int     // answers not yet started
	busy    float64 // seconds until the last of them goes out
	flights []flight
	speed   float64 // tokens/s of one request in the full batch
	alone   float64 // tokens/s of one request once the batch has emptied
	// spread is how the requests' own speeds vary: factors of speed,
	// equally likely, with a median of 1 (see speedSpread). Empty: every
	// request decodes at speed.
	spread []float64
}

// spreadPoints is how many factors speedSpread keeps.
const spreadPoints = 5

// minSpread is how many requests must show their own speed before their
// spread is taken from them.
const minSpread = 16

// speedSpread returns the spread of the flights' own speeds as
// spreadPoints factors of their median, at evenly spaced quantiles. On a
// server where each request streams at a steady speed of its own, the
// longest answer still to come may also be a slow one: the time an
// answer takes is its length over its speed, and both vary. The speeds
// are taken relative to their median because a request's own speed
// counts its wait for the prefill too, which lowers them all alike.
func speedSpread(flights []flight) []float64 {
	var speeds []float64
	for _, f := range flights {
		if f.speed > 0 {
			speeds = append(speeds, f.speed)
		}
	}
	if len(speeds) < minSpread {
		return nil
	}
	slices.Sort(speeds)
	median := speeds[len(speeds)/2]
	out := make([]float64, spreadPoints)
	for k := range out {
		i := int((float64(k) + 0.5) / spreadPoints * float64(len(speeds)))
		out[k] = speeds[min(i, len(speeds)-1)] / median
	}
	return out
}

// lengthSurv is P(L > u), the answer lengths' survival.
type lengthSurv interface {
	at(u float64) float64
	farEnd() float64
}

// tokensBy returns how many tokens a request decoding at speed from
// start has streamed at t: at speed while the batch is busy, and after
// that sped up as a lone request is (alone over the batch's speed).
func (s stragglers) tokensBy(start, t, speed float64) float64 {
	if t <= start {
		return 0
	}
	up := 1.0
	if s.speed > 0 && s.alone > s.speed {
		up = s.alone / s.speed
	}
	if t <= s.busy {
		return speed * (t - start)
	}
	before := math.Max(s.busy-start, 0)
	return speed*before + speed*up*(t-math.Max(start, s.busy))
}

// group is requests in flight alike: as many as k, each at tokens,
// decoding at speed, with P(L > tokens) = at.
type group struct {
	tokens, speed, at, k float64
}

// groups gathers the flights by tokens and speed, those without a speed
// of their own at the batch's.
func (s stragglers) groups() []group {
	byKey := map[[2]float64]int{}
	var out []group
	for _, f := range s.flights {
		v := f.speed
		if !(v > 0) {
			v = s.speed
		}
		key := [2]float64{f.tokens, v}
		if i, ok := byKey[key]; ok {
			out[i].k++
			continue
		}
		at := s.sv.at(f.tokens)
		if !(at > 0) {
			continue
		}
		byKey[key] = len(out)
		out = append(out, group{tokens: f.tokens, speed: v, at: at, k: 1})
	}
	return out
}

// notDone returns P(the last answer ends after t), for the flights
// gathered in gs.
func (s stragglers) notDone(gs []group, t float64) float64 {
	logAllDone := 0.0
	for _, g := range gs {
		p := math.Min(s.sv.at(g.tokens+s.tokensBy(0, t, g.speed))/g.at, 1)
		if p >= 1 {
			return 1
		}
		logAllDone += g.k * math.Log1p(-p)
	}
	if s.queued > 0 {
		factors := s.spread
		if len(factors) == 0 {
			factors = []float64{1}
		}
		starts := stragglerPoints
		if !(s.busy > 0) {
			starts = 1
		}
		q := 0.0
		for i := range starts {
			start := s.busy * (float64(i) + 0.5) / float64(starts)
			for _, f := range factors {
				q += 1 - math.Min(s.sv.at(s.tokensBy(start, t, s.speed*f)), 1)
			}
		}
		q /= float64(starts * len(factors))
		if !(q > 0) {
			return 1
		}
		logAllDone += float64(s.queued) * math.Log(q)
	}
	return -math.Expm1(logAllDone)
}

// horizon is a time by which every answer has ended, in all but a
// negligible share of runs.
func (s stragglers) horizon() float64 {
	slowest := s.speed
	if len(s.spread) > 0 {
		slowest *= slices.Min(s.spread)
	}
	for _, f := range s.flights {
		if f.speed > 0 {
			slowest = math.Min(slowest, f.speed)
		}
	}
	if !(slowest > 0) {
		return 0
	}
	return s.busy + s.sv.farEnd()/slowest
}

// setup returns the horizon and notDone over the gathered flights, or
// ok false when there is nothing to end.
func (s stragglers) setup() (hi float64, notDone func(float64) float64, ok bool) {
	if !(s.speed > 0) || (s.queued == 0 && len(s.flights) == 0) {
		return 0, nil, false
	}
	hi = s.horizon()
	if !(hi > 0) || math.IsInf(hi, 0) {
		return 0, nil, false
	}
	gs := s.groups()
	return hi, func(t float64) float64 { return s.notDone(gs, t) }, true
}

// mean returns the expected time of the last answer's end (0: nothing
// to end).
func (s stragglers) mean() float64 {
	hi, notDone, ok := s.setup()
	if !ok {
		return 0
	}
	pts := make([]float64, 0, stragglerGrid+1)
	pts = append(pts, 0)
	step := math.Pow(1e4, 1/float64(stragglerGrid-1)) // from hi/10⁴ to hi
	for v, i := hi/1e4, 0; i < stragglerGrid; i, v = i+1, v*step {
		pts = append(pts, math.Min(v, hi))
	}
	return integrate(pts, notDone)
}

// quantile returns the time by which the last answer has ended with
// probability q (0: nothing to end).
func (s stragglers) quantile(q float64) float64 {
	hi, notDone, ok := s.setup()
	if !ok {
		return 0
	}
	return quantileOf(notDone, hi, 1-q)
}

// waitingOn says what the ETA waits on: while draining, the requests in
// flight and the longest of them (by tokens, from flights when workers
// list them with their ages, else from censored); before, when the
// stragglers set it, the answers still to come. The heartbeats may still
// list requests whose answers are written since: no more are in flight
// than the run has requests left (remaining).
func waitingOn(phase schema.Phase, inFlight, remaining int, flights []flight, censored []float64) *schema.Stragglers {
	if phase != schema.PhaseDraining {
		return &schema.Stragglers{}
	}
	out := &schema.Stragglers{InFlight: max(min(max(inFlight, len(flights), len(censored)), remaining), 0)}
	var longest flight
	for _, f := range flights {
		if f.tokens > longest.tokens {
			longest = f
		}
	}
	if longest.tokens == 0 && len(censored) > 0 {
		longest.tokens = censored[len(censored)-1]
	}
	out.LongestTokens, out.LongestSec = int(longest.tokens), math.Round(longest.age)
	return out
}

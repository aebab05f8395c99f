package throughput

import (
	"math"
	"sort"
)

// defaultMinRisk is how many observations must still be at risk for the
// product-limit estimate to be trusted. Past the point where fewer
// in-flight or finished requests are that long, one more finish would move
// the curve by a tenth or more, so the fitted tail takes over there.
// Default 10: small enough that in steady state the data decides almost
// everything, large enough that during ramp-up the last few long-running
// requests do not swing the ETA.
const defaultMinRisk = 10

// survival is the distribution of answer lengths as P(L > u): a
// Kaplan–Meier (product-limit) estimate up to end, and beyond it the
// fitted lognormal conditioned on exceeding end. Finished answers are
// exact observations (each histogram bucket at the mean of its members);
// requests still being generated are right-censored at the tokens they
// have streamed. When answers have been truncated at max_tokens, no
// written answer can be longer than the longest truncated one (limit), so
// the tail stops there and the mass beyond it sits at the limit.
//
// Memory: finished answers live in the log-spaced histogram (a few
// thousand buckets for any number of answers); in-flight requests are
// taken exactly, a few hundred per worker, from the latest heartbeats.
//
// Answers restored after a restart are exact observations too. Requests
// that were in flight when the previous process stopped are generated
// again and count as censored at their new, smaller progress until they
// finish, so for a while after a restart long answers are slightly
// underweighted; that corrects itself as those requests finish.
type survival struct {
	points []float64 // lengths where the estimate drops, ascending
	surv   []float64 // P(L > points[i])
	area   []float64 // ∫_0^points[i] P(L > u) du

	end     float64 // the product-limit part covers [0, end]
	endSurv float64 // P(L > end)

	tail    lognormal
	hasTail bool    // endSurv > 0: lengths beyond end are possible
	limit   float64 // > 0: no answer is longer (max_tokens)
	tailMul float64 // endSurv / tail.surv(end)
}

// buildSurvival returns the length distribution for finished answers
// (done) and the sorted token counts of requests in flight (censored).
// fit is the lognormal fitted to the same data; fitOK false means there is
// none. limit > 0 is the max_tokens limit seen on truncated answers. It
// returns nil when the data cannot give a distribution: no observations,
// or requests outliving every finished answer with no tail to extend into.
func buildSurvival(done *histogram, censored []float64, fit lognormal, fitOK bool, limit float64, minRisk float64) *survival {
	total := float64(done.n) + float64(len(censored))
	if total == 0 {
		return nil
	}
	maxCensored := math.Inf(-1)
	if len(censored) > 0 {
		maxCensored = censored[len(censored)-1]
	}
	type bucket struct{ at, count float64 }
	var events []bucket
	done.each(func(mean float64, count int64) {
		events = append(events, bucket{mean, float64(count)})
	})
	sv := &survival{limit: limit}
	risk := total // observations at least as long as the current value
	s := 1.0
	area := 0.0
	last := 0.0
	ei, ci := 0, 0
	for ei < len(events) || ci < len(censored) {
		// The next distinct value, with the answers that ended there and
		// the requests censored there. Requests censored at a value are
		// still at risk of ending there (they are at least that long).
		at := math.Inf(1)
		if ei < len(events) {
			at = events[ei].at
		}
		if ci < len(censored) {
			at = math.Min(at, censored[ci])
		}
		if risk < minRisk && maxCensored >= at {
			break // too few left to trust, and not all of them finished
		}
		ended := 0.0
		if ei < len(events) && events[ei].at == at {
			ended = events[ei].count
			ei++
		}
		stillRunning := 0.0
		for ci < len(censored) && censored[ci] == at {
			stillRunning++
			ci++
		}
		area += s * (at - last)
		last = at
		if ended > 0 && risk > 0 {
			s *= 1 - ended/risk
			sv.points = append(sv.points, at)
			sv.surv = append(sv.surv, s)
			sv.area = append(sv.area, area)
		}
		risk -= ended + stillRunning
	}
	sv.end = last
	sv.endSurv = math.Max(s, 0)
	if sv.endSurv <= 0 {
		return sv
	}
	if !fitOK {
		return nil
	}
	sv.tail = fit
	sv.hasTail = true
	if g := fit.surv(sv.end); g > 1e-12 {
		sv.tailMul = sv.endSurv / g
	}
	// else the fit leaves nothing beyond end: the curve drops to zero
	// there, which is what tailMul 0 does.
	return sv
}

// at returns P(L > u).
func (sv *survival) at(u float64) float64 {
	if u < 0 {
		return 1
	}
	if u < sv.end {
		i := sort.Search(len(sv.points), func(i int) bool { return sv.points[i] > u })
		if i == 0 {
			return 1
		}
		return sv.surv[i-1]
	}
	if u == sv.end {
		return sv.endSurv
	}
	if !sv.hasTail || (sv.limit > 0 && u >= sv.limit) {
		return 0
	}
	return sv.tailMul * sv.tail.surv(u)
}

// areaTo returns ∫_0^x P(L > u) du for 0 <= x <= end.
func (sv *survival) areaTo(x float64) float64 {
	i := sort.Search(len(sv.points), func(i int) bool { return sv.points[i] > x })
	if i == 0 {
		return x
	}
	return sv.area[i-1] + sv.surv[i-1]*(x-sv.points[i-1])
}

// tailArea returns ∫_x^∞ P(L > u) du for x >= end.
func (sv *survival) tailArea(x float64) float64 {
	if !sv.hasTail || sv.tailMul == 0 {
		return 0
	}
	b := math.Inf(1)
	if sv.limit > 0 {
		if x >= sv.limit {
			return 0
		}
		b = sv.limit
	}
	return sv.tailMul * sv.tail.integral(x, b)
}

// from returns ∫_x^∞ P(L > u) du: the expected number of tokens an answer
// produces beyond x, counting answers shorter than x as zero.
func (sv *survival) from(x float64) float64 {
	if x < 0 {
		x = 0
	}
	if x >= sv.end {
		return sv.tailArea(x)
	}
	return sv.areaTo(sv.end) - sv.areaTo(x) + sv.tailArea(sv.end)
}

// mean returns the expected answer length.
func (sv *survival) mean() float64 { return sv.from(0) }

// residual returns the expected number of tokens still to come for a
// request that has streamed c tokens: E[L − c | L > c].
func (sv *survival) residual(c float64) float64 {
	s := sv.at(c)
	if !(s > 0) {
		return 0
	}
	return sv.from(c) / s
}

// farEnd returns a length beyond which the distribution has no mass worth
// integrating.
func (sv *survival) farEnd() float64 {
	e := sv.end
	if sv.hasTail && sv.tailMul > 0 {
		e = math.Max(e, sv.tail.farEnd())
	}
	if sv.limit > 0 {
		e = math.Min(e, math.Max(sv.limit, sv.end))
	}
	return e
}

// within returns the distribution with lengths beyond bound moved to bound:
// what the data has shown, without extrapolating the tail past the longest
// length seen.
func (sv *survival) within(bound float64) *survival {
	c := *sv
	if bound > 0 && (c.limit <= 0 || bound < c.limit) {
		c.limit = math.Max(bound, c.end)
	}
	return &c
}

package throughput

import (
	"math"
	"sort"
)

// defaultFixedShare is the share of a decode step, at a full batch, that
// does not shrink with the batch. A decode step costs a fixed part
// (reading the weights, and with tensor parallelism the all-reduce
// between GPUs) plus a part per running request (its attention over its
// own context), so a request decodes faster as the batch around it
// empties. The reference run's profile put the all-reduce alone at about
// half of a decode step (51.5% on 8 GPUs over PCIe), hence a half. Taking
// none (the speed of a request fixed at that of the full batch) made the
// last batch's drain last about 70% longer than it did in simulation, and
// the ETA err long by about a tenth from the middle of a run on.
//
// The share is of the decoding alone: the prefill of new prompts, which
// the drain loses at once, is measured from the run (see relief.go). How
// wrong the share can be for other hardware, and the relief before it
// can be measured, is what the band's drain part allows for: from a
// tenth to all of the step (see fixedShareLow, fixedShareHigh).
const defaultFixedShare = 0.5

// fixedShareLow and fixedShareHigh bound the fixed share for the band:
// a step that is a tenth fixed (a lone request up to ten times as fast as
// one in a full batch) to one that does not depend on the batch at all.
// Short answers to long prompts put the prefill of new prompts into most
// steps, and the drain has none: in the heavy-tail study (answers of 300
// tokens on average after 1,000-token prompts) the last requests decoded
// 4.6 times as fast as in the full batch, beyond the quarter-fixed step
// the band used to allow, and the band missed every drain of those runs.
// The point now measures that relief (see relief.go). The band's low end
// takes it too and keeps the tenth on top: before the relief can be
// measured (the steady state's first twenty seconds) that covers it, and
// after, the measure can err low.
const (
	fixedShareLow  = 0.1
	fixedShareHigh = 1.0
)

// decodeModel is the decode speed of one request, once the last prompt
// is handed out, as a function of the number of requests decoding with
// it: a step costs fixed + k·per, so the speed at k requests is
// relief·speed·(rho + n + bg)/(rho + k + bg), where speed was measured at
// n requests while prompts still arrived, relief is what their prefill
// cost each step (see relief.go), rho = fixed/per is the batch at which
// the requests' share of a step equals the fixed part, and bg is the
// requests of other runs decoding beside them, taken to stay: a worker
// that serves several runs hands the slots this run frees to the others,
// so its batch empties less than this run's requests do, and their
// prompts keep arriving. (If the others refill every slot the speed does
// not change at all: the band's high end, a step that does not depend on
// the batch, covers that.)
type decodeModel struct {
	speed  float64 // tokens/s of one request, measured at n requests
	n      float64
	rho    float64 // +Inf: the speed does not depend on the batch
	bg     float64
	relief float64 // >= 1
}

// newDecodeModel returns the model for a speed measured with n requests
// decoding beside bg of other runs, when a full batch of full requests
// spends share of each step's decoding on its fixed part and the end of
// arrivals speeds every request up by relief. With other runs beside
// (bg > 0) their prompts keep arriving, and there is no relief.
func newDecodeModel(speed, n, full, share, bg, relief float64) decodeModel {
	n = math.Max(n, 1)
	bg = math.Max(bg, 0)
	full = math.Max(full, n+bg)
	rho := math.Inf(1)
	if share < 1 {
		rho = full * share / (1 - share)
	}
	if bg > 0 || !(relief > 1) {
		relief = 1
	}
	return decodeModel{speed: speed, n: n, rho: rho, bg: bg, relief: relief}
}

// at returns the speed of one request with k requests of this run
// decoding.
func (d decodeModel) at(k float64) float64 {
	r := math.Max(d.relief, 1)
	if math.IsInf(d.rho, 1) {
		return r * d.speed
	}
	return r * d.speed * (d.rho + d.n + d.bg) / (d.rho + math.Max(k, 1) + d.bg)
}

// drainTime returns the expected seconds until the last of n requests
// finishes, when the requests still to run are drawn from surv (P(R > r)
// for their remaining lengths) and the longest of them is expected to be
// top tokens. Every running request gets one token per step, so the
// survivors advance together: with r_1 <= ... <= r_n the remaining
// lengths, the time is Σ (r_i − r_{i−1}) / speed(n − i + 1). The r_i are
// taken at their expected order statistics: quantiles of surv (Blom's
// plotting positions) for all but the longest, which is top, computed
// exactly from the distribution.
func drainTime(surv func(float64) float64, hi float64, n int, top float64, d decodeModel) float64 {
	if n <= 0 || !(top > 0) {
		return 0
	}
	pts := grid(hi)
	s := make([]float64, len(pts))
	for i, x := range pts {
		s[i] = math.Min(math.Max(surv(x), 0), 1)
	}
	// quantile returns r with P(R > r) = q, interpolating on the grid
	// (s is non-increasing).
	quantile := func(q float64) float64 {
		i := sort.Search(len(s), func(i int) bool { return s[i] <= q })
		if i == 0 {
			return pts[0]
		}
		if i == len(s) {
			return pts[len(pts)-1]
		}
		a, b := s[i-1], s[i]
		if a == b {
			return pts[i]
		}
		return pts[i-1] + (pts[i]-pts[i-1])*(a-q)/(a-b)
	}
	t, prev := 0.0, 0.0
	for i := 1; i <= n; i++ {
		r := top
		if i < n {
			r = math.Min(quantile(1-(float64(i)-0.375)/(float64(n)+0.25)), top)
		}
		r = math.Max(r, prev)
		t += (r - prev) / d.at(float64(n-i+1))
		prev = r
	}
	return t
}

// equilibriumSurv returns P(R > r) for the remaining length of a request
// caught at a random moment of its life: ∫_r^∞ P(L > u) du / E[L].
func equilibriumSurv(sv lengthDist) func(float64) float64 {
	mean := sv.mean()
	return func(r float64) float64 {
		if !(mean > 0) {
			return 0
		}
		return math.Min(sv.from(r)/mean, 1)
	}
}

// inFlightSurv returns P(R > r) for the remaining length of one of the
// requests in flight picked at random: those that have streamed
// censored[i] tokens and unlisted ones that have streamed none.
func inFlightSurv(sv *survival, censored []float64, unlisted int) func(float64) float64 {
	type group struct{ c, k, s float64 }
	var groups []group
	total := 0.0
	if unlisted > 0 {
		groups = append(groups, group{0, float64(unlisted), sv.at(0)})
		total += float64(unlisted)
	}
	for i := 0; i < len(censored); {
		j := i
		for j < len(censored) && censored[j] == censored[i] {
			j++
		}
		if s := sv.at(censored[i]); s > 0 {
			groups = append(groups, group{censored[i], float64(j - i), s})
		}
		total += float64(j - i)
		i = j
	}
	return func(r float64) float64 {
		if total == 0 {
			return 0
		}
		sum := 0.0
		for _, g := range groups {
			sum += g.k * math.Min(sv.at(g.c+r)/g.s, 1)
		}
		return sum / total
	}
}

// longestOf returns E[max of n residuals] for residuals drawn from the
// equilibrium distribution of sv, and E[one of them].
func longestOf(sv lengthDist, n int) (longest, one float64) {
	mean := sv.mean()
	if n < 1 || !(mean > 0) {
		return 0, 0
	}
	pts := grid(sv.farEnd())
	tail := equilibriumSurv(sv)
	one = integrate(pts, tail)
	longest = integrate(pts, func(r float64) float64 {
		return -math.Expm1(float64(n) * math.Log1p(-math.Min(tail(r), 1)))
	})
	return longest, one
}

// maxSurvEquilibrium returns P(max > r) for n residuals drawn from the
// equilibrium distribution of sv.
func maxSurvEquilibrium(sv lengthDist, n int) func(float64) float64 {
	tail := equilibriumSurv(sv)
	return func(r float64) float64 {
		return -math.Expm1(float64(n) * math.Log1p(-math.Min(tail(r), 1)))
	}
}

// maxSurvInFlight returns P(max > r) for the remaining lengths of the
// requests in flight (see inFlightSurv).
func maxSurvInFlight(sv *survival, censored []float64, unlisted int) func(float64) float64 {
	return func(r float64) float64 {
		logAllDone := 0.0
		if unlisted > 0 {
			logAllDone += float64(unlisted) * math.Log1p(-math.Min(sv.at(r)/sv.at(0), 1))
		}
		for _, c := range censored {
			s := sv.at(c)
			if !(s > 0) {
				continue
			}
			logAllDone += math.Log1p(-math.Min(sv.at(c+r)/s, 1))
		}
		return -math.Expm1(logAllDone)
	}
}

// quantileOf returns the r in [0, hi] with surv(r) = q for a
// non-increasing surv, by bisection.
func quantileOf(surv func(float64) float64, hi, q float64) float64 {
	lo := 0.0
	if surv(hi) > q {
		return hi
	}
	for range 60 {
		mid := (lo + hi) / 2
		if surv(mid) > q {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1 {
			break
		}
	}
	return (lo + hi) / 2
}

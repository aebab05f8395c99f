package throughput

import "math"

// The tail model: beyond the lengths the data covers well, answer lengths
// are taken to be lognormal, in the form log(1+L) ~ Normal(m, s²) so that
// zero-length answers fit too.
//
// Why lognormal rather than exponential: reasoning answers are strongly
// right-skewed with a long tail (with s = 1, one answer in a hundred is
// more than ten times the median), and the logarithm of their length is
// roughly symmetric. An exponential
// tail has a constant hazard and, fitted to the short answers that finish
// first, both misplaces the bulk and cuts the long chains short. The
// lognormal is fitted to all the data, with in-flight requests (and
// truncated answers) right-censored, so during ramp-up it uses the two
// things that are known: the shape of the short answers that finished and
// how many requests have already outlived each length. Its spread is
// steadied by a prior while little has finished (see defaultPrior).

// spreadPrior pulls the fitted spread s towards sigma with the weight of
// weight observations (a scaled inverse-chi-squared prior on s², so the
// fit is a maximum a posteriori estimate).
type spreadPrior struct {
	sigma, weight float64
}

// defaultPrior is s ≈ 1 with the weight of 50 observations.
//
// Early in a run the data fix the short end of the distribution well (the
// answers that finished, and how many requests outlived each length) but
// say little about how far the long answers reach, which is most of the
// mean: one minute into the run this project grew from, about 40 of the
// first 200 requests had finished, the shortest fifth. A free fit then
// swings the estimated mean by a factor of two either way from one run to
// the next. The project's calibration for reasoning answers is lognormal
// with a median of about 1,500 tokens and s about 1, so the fit leans on
// s = 1 until the data can tell: 50 observations are a quarter of a first
// wave of 200 requests, and once a few hundred answers have finished the
// data outweigh the prior. For a model whose answers are much less or more
// spread out, the first minutes' estimates are biased (the tests measure
// how much); later ones are not.
var defaultPrior = spreadPrior{sigma: 1, weight: 50}

// Fit limits. s is kept in [minSigma, maxSigma] so that a degenerate sample
// (all answers the same length, or a handful of wild ones) cannot produce
// a zero or exploding spread; m is kept within the lengths the histogram
// can hold.
const (
	minSigma     = 0.01
	maxSigma     = 4.0
	fitTolerance = 1e-7
	fitMaxIter   = 5000
)

// lognormal is log(1+L) ~ Normal(m, s²).
type lognormal struct {
	m, s float64
}

// weightedLog is a right-censored observation for the fit: log(1+c) with a
// weight (the number of observations censored there).
type weightedLog struct {
	y, w float64
}

// upperTail is P(Z > z) for a standard normal Z, accurate far into the tail.
func upperTail(z float64) float64 {
	return 0.5 * math.Erfc(z/math.Sqrt2)
}

// between is P(lo < Z < hi) for a standard normal Z, computed on the side
// of zero where it does not cancel.
func between(lo, hi float64) float64 {
	if hi <= lo {
		return 0
	}
	if lo >= 0 {
		return upperTail(lo) - upperTail(hi)
	}
	return upperTail(-hi) - upperTail(-lo)
}

// mills is the inverse Mills ratio φ(a)/P(Z > a), the mean of a standard
// normal truncated to (a, ∞). Far in the tail it uses the asymptotic
// series, where the direct ratio would underflow.
func mills(a float64) float64 {
	if a > 25 {
		a2 := a * a
		return a / (1 - 1/a2 + 3/(a2*a2))
	}
	phi := math.Exp(-0.5*a*a) / math.Sqrt(2*math.Pi)
	q := upperTail(a)
	if q <= 0 {
		return math.Max(a, 0)
	}
	return phi / q
}

// surv is P(L > u) under the model.
func (d lognormal) surv(u float64) float64 {
	if u < 0 {
		return 1
	}
	return upperTail((math.Log1p(u) - d.m) / d.s)
}

// integral is ∫_a^b P(L > u) du for 0 <= a <= b (b may be +Inf): the
// expected part of an answer's length that falls between a and b. It is
// computed in closed form from E[e^Y; α<Y<β] = e^(m+s²/2)·P(α' < Z < β').
func (d lognormal) integral(a, b float64) float64 {
	if a < 0 {
		a = 0
	}
	if !(b > a) {
		return 0
	}
	alpha := (math.Log1p(a) - d.m - d.s*d.s) / d.s
	beta := math.Inf(1)
	upper := 0.0
	if !math.IsInf(b, 1) {
		beta = (math.Log1p(b) - d.m - d.s*d.s) / d.s
		upper = (1 + b) * d.surv(b)
	}
	v := math.Exp(d.m+d.s*d.s/2)*between(alpha, beta) - (1+a)*d.surv(a) + upper
	if !(v > 0) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// from returns ∫_x^∞ P(L > u) du.
func (d lognormal) from(x float64) float64 { return d.integral(x, math.Inf(1)) }

// mean returns E[L].
func (d lognormal) mean() float64 { return d.from(0) }

// farEnd returns the length beyond which the model leaves only
// P(Z > 6) ≈ 1e-9 of the mass: where numeric integrals can stop.
func (d lognormal) farEnd() float64 {
	return math.Expm1(math.Min(d.m+6*d.s, math.Log(maxLength)))
}

// fitLognormal fits the lognormal to exact observations (summarised by
// their log moments) and right-censored ones, maximising the likelihood
// times the spread prior p (plain maximum likelihood when p.weight is 0).
// It uses expectation-maximisation: each censored log-length is replaced
// by its conditional mean and second moment given that it exceeds its
// censoring point, and the normal's parameters are re-estimated, until
// they stop moving. EM never decreases the objective, so it cannot diverge
// the way a Newton step can on heavily censored data; it is slow when most
// data is censored, which is why the caller passes the previous fit as a
// warm start. ok is false when there are no exact observations: lengths
// only known to exceed something cannot place a distribution.
func fitLognormal(exact logMoments, cens []weightedLog, start lognormal, warm bool, p spreadPrior) (d lognormal, ok bool) {
	if exact.n < 1 {
		return lognormal{}, false
	}
	n := exact.n
	for _, c := range cens {
		n += c.w
	}
	maxM := math.Log(maxLength)
	if warm && start.s >= minSigma && start.s <= maxSigma && start.m >= 0 && start.m <= maxM {
		d = start
	} else {
		// Start as though the censored values were exact: too short, but
		// on the right scale.
		sy, syy := exact.sum, exact.sumSq
		for _, c := range cens {
			sy += c.w * c.y
			syy += c.w * c.y * c.y
		}
		d.m = sy / n
		d.s = math.Max(math.Sqrt(math.Max(syy/n-d.m*d.m, 0)), 0.5)
	}
	d = d.clamp()
	for range fitMaxIter {
		sy, syy := exact.sum, exact.sumSq
		for _, c := range cens {
			l := mills((c.y - d.m) / d.s)
			sy += c.w * (d.m + d.s*l)
			syy += c.w * (d.m*d.m + d.s*d.s + d.s*l*(d.m+c.y))
		}
		next := lognormal{m: sy / n}
		ss := math.Max(syy-n*next.m*next.m, 0)
		next.s = math.Sqrt((ss + p.weight*p.sigma*p.sigma) / (n + p.weight))
		next = next.clamp()
		if math.IsNaN(next.m) || math.IsNaN(next.s) {
			return lognormal{}, false
		}
		done := math.Abs(next.m-d.m) < fitTolerance && math.Abs(next.s-d.s) < fitTolerance
		d = next
		if done {
			break
		}
	}
	return d, true
}

func (d lognormal) clamp() lognormal {
	d.m = math.Min(math.Max(d.m, 0), math.Log(maxLength))
	d.s = math.Min(math.Max(d.s, minSigma), maxSigma)
	return d
}

package throughput

import (
	"math"
	"slices"

	"github.com/aerie-dev/aerie/schema"
)

// etaGrid is the number of points of the numeric integrals over answer
// lengths (log-spaced, about 5% apart across six decades): fine enough
// that the integration error stays under a percent of the drain time.
const etaGrid = 256

// etaInput is what the ETA is computed from.
type etaInput struct {
	phase     schema.Phase
	remaining int       // requests neither done nor accounted for
	inFlight  int       // requests live workers are generating
	censored  []float64 // tokens streamed by each listed in-flight request, ascending
	lengths   *survival // nil when not yet estimated
	speed     float64   // tokens/s of one decoding request
	decoding  int       // requests streaming tokens now
	longest   float64   // longest answer length seen, finished or in flight
	// turns is the mean number of turns of the lines not yet finished,
	// when a line is a conversation regenerated turn by turn; turns <= 1
	// means one request per line.
	turns float64
	// queuedLines counts the lines not yet handed out to a worker.
	queuedLines int
	// longestLine is the most tokens a written line took, over all its
	// turns.
	longestLine float64
	// full is the number of requests the live workers hold when their
	// windows are full: the batch of the steady state.
	full int
	// background is the requests of other runs that the same workers
	// hold: they share every decode step with this run's requests, so
	// this run's drain speeds up less than its own batch alone would.
	background int
	// finished counts the requests written, the observations behind the
	// length estimate.
	finished int
	// requests is the number of requests the whole run makes.
	requests int
	// flights is the requests in flight that workers list, with their
	// own speed where known (see stragglers).
	flights []flight
	// relief is how much faster the requests decode once no prompts
	// arrive (see relief.go): measured in steady state, and 1 once the
	// speed is measured without arrivals. Zero counts as 1.
	relief float64
	// bulkOnly leaves out the stragglers' end: set by eta for the drain
	// of the requests in flight it weighs near the end, whose stragglers
	// its own stragglers' end already counts.
	bulkOnly bool
}

// runLongest returns the length the run's longest answer is expected to
// reach: the longest seen so far, or the length only one answer in
// requests exceeds, whichever is longer. Cutting the distribution at the
// longest seen alone left the drain short in the first minutes, when few
// long answers have had time to finish (the ETA's median error at 2% and
// 5% of the reference run was about −3%, 0% with this); extrapolating
// the tail without bound overstates it, putting lengths far beyond what
// a run of this size produces. During ramp-up the tail rests mostly on
// the prior and the lengths may be capped by a max_tokens no answer has
// reached yet, so the caller cuts at the longest seen until the first
// wave has turned over: extrapolating then put the ETA half again too
// long one minute into a run whose answers stopped at max_tokens.
func runLongest(sv *survival, seen float64, requests int) float64 {
	if requests < 1 {
		return seen
	}
	return max(seen, quantileOf(sv.at, sv.farEnd(), 1/float64(requests)))
}

// etaBand is an ETA with its band: the run should end between low and
// high seconds from now in at least four runs out of five (docs/eta.md).
// All three are -1 when there is no estimate.
type etaBand struct {
	eta, low, high float64
	// stragglers is set when the run's longest answers, not its bulk,
	// set the point ETA (see stragglers).
	stragglers bool
}

var noETA = etaBand{eta: -1, low: -1, high: -1}

// bandZ is the normal quantile of the band's statistical part: 1.645,
// the 5th and 95th percentiles. The band's model part (the drain's
// speed-up) is added on top, so the coverage aimed at is above the 80%
// promised.
const bandZ = 1.645

// eta returns the estimated seconds to the end of the run with its band:
// 0 when done, -1 when there is no length estimate or no token rate yet.
//
// Work is counted in requests (turns): a conversation regenerated turn by
// turn is as many requests as it has turns, and a worker holding one is
// generating one of them. While requests are still waiting to be handed
// out (including the later turns of conversations in flight), the run is
// modelled as a batch that stays full until the last request is handed
// out and then empties:
//
//	ETA = remaining tokens / token rate − E[R] / speed + drain
//
// Remaining tokens are the expected length of every request not yet started
// plus, for each in-flight request, its expected remaining length given
// how far it has got, E[L − c | L > c] (larger than mean − c: a request
// that is already long is likely to be a long one). The token rate is the
// per-request decode speed times the number of requests decoding now,
// which equals TokensPerSec in steady state but, during ramp-up, is the
// rate the full batch is about to reach rather than a minute's average of
// a rate still climbing. It is the one reported because it is also right
// in the first minutes, when counting completions is not.
//
// drain is what an average-rate view gets wrong at the end: once nothing
// is left to hand out, slots go idle one by one and the run ends with its
// longest remaining answer, not when the average one would; and the
// requests left decode faster, at once because no new prompts are
// prefilled (the relief, measured: see relief.go) and then as the batch
// around them empties (see defaultFixedShare and drainTime). With n
// requests in flight when the last request goes out, their remaining
// lengths R are those seen at a random moment in a slot's life (density
// P(L > r)/E[L]); the first term counts the average of them at the full
// batch's speed, E[R]/speed, which the drain replaces. The longest of n
// depends on the far tail, so the distribution is cut at the longest
// answer the run is expected to produce (see runLongest); once an answer
// has been truncated, its length is the max_tokens limit and bounds the
// tail exactly.
//
// When nothing is left to hand out (draining) the ETA is the drain of the
// requests in flight, each from its own progress. Shortly before that,
// the larger of the two is reported.
//
// The band (etaBand) widens the time before the drain by the standard
// error of the mean length and the randomness of the lengths still to
// come (see workSpread), takes the drain's longest answer at the 5th and
// 95th percentiles of the longest of n instead of its mean, and lets the
// drain's speed-up range from none to that of a step a tenth fixed
// (fixedShareLow, fixedShareHigh).
//
// With conversations regenerated turn by turn, a slot is held by a
// conversation for all its turns, one after another, so what ends the
// run is the longest of the last conversations, not of the last
// requests: the drain is then computed for conversations, each taken to
// have the mean number of turns of the lines not yet finished (see
// chainOf), cut at the most tokens a written line took, at the measured
// per-request speed throughout (no speed-up), and the band is the ETA
// alone. Once every
// conversation is handed out, the ETA is the expected end of the last
// one, each finishing its current turn and then its share of the turns
// left (see chainFinish). The spread of turn counts between
// conversations is left out: the mix still to come is not known, and
// taking that of the lines written (the short conversations finish
// first) overstated the drain in simulation. The prefill between turns
// is left out too. In simulation with a mix of one- and five-turn
// conversations this keeps the ETA within about a third of the truth
// from a tenth of the run on, where counting lines was off by up to a
// factor of four.
func eta(in etaInput) etaBand {
	if in.phase == schema.PhaseDone {
		return etaBand{}
	}
	sv := in.lengths
	rate := in.speed * float64(in.decoding)
	if sv == nil || !(rate > 0) {
		return noETA
	}
	mean := sv.mean()
	if !(mean > 0) {
		return noETA
	}
	remaining := max(in.remaining, 0)
	unlisted := max(in.inFlight-len(in.censored), 0) // in flight, not reported: just started
	held := max(in.inFlight, len(in.censored))
	n := max(held, 1)
	queued := max(remaining-held, 0)
	if in.turns > 1 {
		t := etaTurns(in, sv, rate, mean, unlisted, held, n, queued)
		return etaBand{eta: t, low: t, high: t}
	}
	full := float64(max(in.full, n))
	model := func(share, relief float64) decodeModel {
		return newDecodeModel(in.speed, float64(max(in.decoding, 1)), full, share, float64(in.background), relief)
	}
	// fastest is the band's fastest drain: the relief measured, and a
	// decode step a tenth fixed.
	fastest := func(surv func(float64) float64, hi float64, n int, top float64) float64 {
		return drainTime(surv, hi, n, top, model(fixedShareLow, in.relief))
	}
	if queued == 0 {
		// Draining: the run ends with the last of the requests in flight.
		surv := inFlightSurv(sv, in.censored, unlisted)
		maxSurv := maxSurvInFlight(sv, in.censored, unlisted)
		hi := sv.farEnd()
		top := lastFinish(sv, in.censored, unlisted)
		b := etaBand{
			eta:  drainTime(surv, hi, held, top, model(defaultFixedShare, in.relief)),
			low:  fastest(surv, hi, held, quantileOf(maxSurv, hi, 0.95)),
			high: drainTime(surv, hi, held, quantileOf(maxSurv, hi, 0.05), model(fixedShareHigh, 1)),
		}
		if in.bulkOnly {
			return b
		}
		return withStragglers(b, stragglersEnd(in, sv, 0, 0, unlisted, model))
	}
	work := float64(queued+unlisted) * mean
	for _, c := range in.censored {
		work += sv.residual(c)
	}
	// The work is done at the full batch's rate until the last request
	// is handed out; the n requests then in flight drain the batch.
	bound := in.longest
	if in.phase != schema.PhaseRampUp {
		bound = runLongest(sv, in.longest, in.requests)
	}
	last := sv.within(bound)
	longest, one := longestOf(last, n)
	surv := equilibriumSurv(last)
	hi := last.farEnd()
	maxSurv := maxSurvEquilibrium(last, n)
	busy := work/rate - one/in.speed
	spread := bandZ * workSpread(in, sv, mean, queued)
	b := etaBand{
		eta:  busy + drainTime(surv, hi, n, longest, model(defaultFixedShare, in.relief)),
		low:  busy*math.Exp(-spread) + fastest(surv, hi, n, quantileOf(maxSurv, hi, 0.95)),
		high: busy*math.Exp(spread) + drainTime(surv, hi, n, quantileOf(maxSurv, hi, 0.05), model(fixedShareHigh, 1)),
	}
	if queued < n {
		// Close to the end the requests in flight may outlast the rest.
		d := eta(etaInput{phase: in.phase, remaining: held, inFlight: in.inFlight, censored: in.censored,
			lengths: sv, speed: in.speed, decoding: in.decoding, longest: in.longest, full: in.full, background: in.background,
			flights: in.flights, relief: in.relief, bulkOnly: true})
		b = laterOf(b, d)
	}
	// During ramp-up the tail rests mostly on the prior: as for the bulk's
	// drain, the stragglers are cut at the longest answer seen so far.
	tail := sv
	if in.phase == schema.PhaseRampUp {
		tail = sv.within(in.longest)
	}
	return withStragglers(b, stragglersEnd(in, tail, queued, math.Max(busy, 0), unlisted, model))
}

// laterOf is the later of two ends, each bound taken the later; it is
// the stragglers' when b's point is later and b is theirs.
func laterOf(a, b etaBand) etaBand {
	return etaBand{eta: max(a.eta, b.eta), low: max(a.low, b.low), high: max(a.high, b.high),
		stragglers: (b.eta > a.eta && b.stragglers) || (a.eta >= b.eta && a.stragglers)}
}

// withStragglers is the bulk's end b moved later by the stragglers' s:
// the later point and high end, and the bulk's low end. The stragglers'
// low end is the 5th percentile of the longest of many answers, which
// sits close to its mean; taken as a bound it rests on the fitted tail
// being right far beyond the answers seen, and in the reference study
// it raised the band above the truth at 12 of 120 checkpoints, most of
// them in the first minutes, where the tail is mostly the prior's.
func withStragglers(b, s etaBand) etaBand {
	out := laterOf(b, s)
	out.low = b.low
	return out
}

// stragglersEnd is the run's end as its longest answers set it (see
// stragglers): queued answers not yet started, handed out over busy
// seconds, and the requests in flight, unlisted ones from no tokens. The
// lone requests at the end speed up as the drain's model says, by its
// default share and the relief for the point, and not at all for the
// band's high end.
// It has no low end: the band keeps the bulk's (see withStragglers).
func stragglersEnd(in etaInput, sv *survival, queued int, busy float64, unlisted int, model func(share, relief float64) decodeModel) etaBand {
	// Clipped: the unlisted requests appended below must not land in the
	// spare capacity of the caller's slice.
	flights := slices.Clip(in.flights)
	if len(flights) == 0 {
		for _, c := range in.censored {
			flights = append(flights, flight{tokens: c})
		}
	}
	// The flights' own speeds count their wait for the prefill, and were
	// measured over their whole lives: scaled to a median of the speed
	// measured now, they keep only how they differ from one another.
	var own []float64
	for _, f := range flights {
		if f.speed > 0 {
			own = append(own, f.speed)
		}
	}
	if len(own) > 0 {
		slices.Sort(own)
		scale := in.speed / own[len(own)/2]
		scaled := make([]flight, len(flights))
		for i, f := range flights {
			scaled[i] = flight{tokens: f.tokens, speed: f.speed * scale, age: f.age}
		}
		flights = scaled
	}
	for range unlisted {
		flights = append(flights, flight{})
	}
	s := stragglers{sv: sv, queued: queued, busy: busy, flights: flights, speed: in.speed, spread: speedSpread(flights)}
	s.alone = model(defaultFixedShare, in.relief).at(1)
	mean := s.mean()
	s.alone = in.speed
	high := s.quantile(0.95)
	return etaBand{eta: mean, high: high, stragglers: true}
}

// workSpread returns the relative standard deviation of the time the
// work before the drain takes, from the two things that make it
// uncertain: the mean length, estimated from the answers finished so far
// (its standard error, sd/√n, with the in-flight requests counted as
// half an answer each, since they say only that an answer is longer than
// something), and the sum of the lengths still to come, random even with
// the mean known (sd·√queued). The rate is taken as known: it is
// measured over minutes of thousands of tokens a second.
func workSpread(in etaInput, sv *survival, mean float64, queued int) float64 {
	second := 2 * integrate(grid(sv.farEnd()), sv.from) // E[L²] = 2∫ u P(L > u) du
	variance := math.Max(second-mean*mean, 0)
	nEff := float64(in.finished) + float64(len(in.censored))/2
	if nEff < 1 {
		nEff = 1
	}
	meanVar := variance / nEff / (mean * mean)
	sumVar := 0.0
	if queued > 0 {
		sumVar = variance / float64(queued) / (mean * mean)
	}
	return math.Sqrt(meanVar + sumVar)
}

// etaTurns is the ETA of a run of conversations regenerated turn by turn
// (see eta).
func etaTurns(in etaInput, sv *survival, rate, mean float64, unlisted, held, n, queued int) float64 {
	if queued == 0 {
		return lastFinish(sv, in.censored, unlisted) / in.speed
	}
	if in.queuedLines <= 0 {
		// Every conversation is handed out: the run ends with the last of
		// them, each finishing its current turn and then its later ones.
		later := cutAt{chainOf(sv.within(in.longest), float64(queued)/float64(n)), in.longestLine}
		return max(chainFinish(sv, in.censored, unlisted, later), lastFinish(sv, in.censored, unlisted)) / in.speed
	}
	work := float64(queued+unlisted) * mean
	for _, c := range in.censored {
		work += sv.residual(c)
	}
	last := cutAt{chainOf(sv.within(in.longest), in.turns), in.longestLine}
	t := work/rate + drainPenalty(last, n)/in.speed
	if queued < n {
		t = max(t, lastFinish(sv, in.censored, unlisted)/in.speed)
	}
	return t
}

// grid returns etaGrid points from 0 to hi, log-spaced above 1 token.
func grid(hi float64) []float64 {
	pts := make([]float64, 0, etaGrid+1)
	pts = append(pts, 0)
	if !(hi > 1) {
		return append(pts, math.Max(hi, 0))
	}
	step := math.Pow(hi, 1/float64(etaGrid-1))
	v := 1.0
	for range etaGrid {
		pts = append(pts, math.Min(v, hi))
		v *= step
	}
	return pts
}

// integrate applies the trapezoid rule to f over pts.
func integrate(pts []float64, f func(float64) float64) float64 {
	sum := 0.0
	prev := f(pts[0])
	for i := 1; i < len(pts); i++ {
		cur := f(pts[i])
		sum += (pts[i] - pts[i-1]) * (prev + cur) / 2
		prev = cur
	}
	return sum
}

// lengthDist is a distribution of lengths as the drain needs it.
type lengthDist interface {
	mean() float64
	// from returns ∫_x^∞ P(L > u) du.
	from(x float64) float64
	// farEnd returns a length beyond which there is no mass worth
	// integrating.
	farEnd() float64
}

// chainOf returns the distribution of the total length of a conversation
// of turns turns (a mean: it need not be whole), each as long as sv says:
// a lognormal with the sum's mean, turns·E[L], and variance,
// turns·Var(L). A sum of a few right-skewed lengths is right-skewed too;
// the lognormal keeps that, which a normal would not.
func chainOf(sv *survival, turns float64) lognormal {
	mean := sv.mean()
	second := 2 * integrate(grid(sv.farEnd()), sv.from) // E[L²] = 2∫ u P(L > u) du
	variance := math.Max(second-mean*mean, 0)
	cm := turns * mean
	cv := turns * variance
	if !(cm > 0) {
		return lognormal{s: minSigma}
	}
	s2 := math.Log1p(cv / ((1 + cm) * (1 + cm)))
	return lognormal{m: math.Log1p(cm) - s2/2, s: math.Sqrt(s2)}.clamp()
}

// chainFinish returns, in tokens of one request, the expected time until
// the last of the conversations in flight ends, each finishing its
// current turn (expected to take its residual, from the tokens it has
// streamed, censored, or from none, unlisted) and then later turns
// that together take as long as later says:
// ∫ 1 − Π_i P(e_i + X <= r) dr with e_i the expected residual.
func chainFinish(sv *survival, censored []float64, unlisted int, later cutAt) float64 {
	type group struct {
		e, k float64
	}
	var groups []group
	top := 0.0
	add := func(e float64, k int) {
		groups = append(groups, group{e, float64(k)})
		top = max(top, e)
	}
	if unlisted > 0 {
		add(sv.mean(), unlisted)
	}
	for i := 0; i < len(censored); {
		j := i
		for j < len(censored) && censored[j] == censored[i] {
			j++
		}
		add(sv.residual(censored[i]), j-i)
		i = j
	}
	if len(groups) == 0 {
		return 0
	}
	pts := grid(top + later.farEnd())
	return integrate(pts, func(r float64) float64 {
		logAllDone := 0.0
		for _, g := range groups {
			y := r - g.e
			if y < 0 {
				return 1
			}
			p := later.at(y)
			if p >= 1 {
				return 1
			}
			logAllDone += g.k * math.Log1p(-p)
		}
		return -math.Expm1(logAllDone)
	})
}

// cutAt is a lognormal with lengths beyond bound moved to bound (no cut
// when bound is not positive).
type cutAt struct {
	d     lognormal
	bound float64
}

func (c cutAt) from(x float64) float64 {
	if !(c.bound > 0) {
		return c.d.from(x)
	}
	if x >= c.bound {
		return 0
	}
	return c.d.integral(x, c.bound)
}

func (c cutAt) mean() float64 { return c.from(0) }

// at returns P(L > x).
func (c cutAt) at(x float64) float64 {
	if c.bound > 0 && x >= c.bound {
		return 0
	}
	return c.d.surv(x)
}

func (c cutAt) farEnd() float64 {
	if !(c.bound > 0) {
		return c.d.farEnd()
	}
	return math.Min(c.d.farEnd(), c.bound)
}

// drainPenalty returns, in tokens of one request, how much longer the
// longest of n residual answers is than an average one, for residuals
// drawn from the equilibrium distribution P(R > r) = ∫_r^∞ P(L > u) du / E[L].
func drainPenalty(sv lengthDist, n int) float64 {
	mean := sv.mean()
	if n <= 1 || !(mean > 0) {
		return 0
	}
	pts := grid(sv.farEnd())
	tail := func(r float64) float64 { return math.Min(sv.from(r)/mean, 1) }
	one := integrate(pts, tail)
	longest := integrate(pts, func(r float64) float64 {
		return -math.Expm1(float64(n) * math.Log1p(-tail(r)))
	})
	return math.Max(longest-one, 0)
}

// lastFinish returns, in tokens of one request, the expected longest
// remaining length among requests that have streamed censored[i] tokens
// (ascending) and unlisted requests that have streamed none:
// ∫ 1 − Π_i P(R_i <= r) dr with P(R_i > r) = P(L > c_i + r) / P(L > c_i).
func lastFinish(sv *survival, censored []float64, unlisted int) float64 {
	type group struct {
		c, k, s float64
	}
	var groups []group
	if unlisted > 0 {
		groups = append(groups, group{0, float64(unlisted), sv.at(0)})
	}
	for i := 0; i < len(censored); {
		j := i
		for j < len(censored) && censored[j] == censored[i] {
			j++
		}
		if s := sv.at(censored[i]); s > 0 {
			groups = append(groups, group{censored[i], float64(j - i), s})
		}
		i = j
	}
	if len(groups) == 0 {
		return 0
	}
	pts := grid(sv.farEnd())
	// Residuals only shrink in probability as r grows, so a group that is
	// certainly done by r stays done: drop it from later points. Once some
	// request is all but certain to run longer than r the integrand is 1
	// to double precision and the rest need not be looked at.
	return integrate(pts, func(r float64) float64 {
		logAllDone := 0.0
		live := groups[:0]
		for i, g := range groups {
			p := math.Min(sv.at(g.c+r)/g.s, 1)
			if p <= 0 {
				continue
			}
			live = append(live, g)
			logAllDone += g.k * math.Log1p(-p)
			if logAllDone < -40 {
				live = append(live, groups[i+1:]...)
				break
			}
		}
		groups = live
		return -math.Expm1(logAllDone)
	})
}

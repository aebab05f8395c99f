package throughput

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		t.Errorf("%s = %.6g, want %.6g ± %.2g", what, got, want, tol)
	}
}

func histOf(lengths ...int64) *histogram {
	h := &histogram{}
	for _, n := range lengths {
		h.add(n)
	}
	return h
}

func TestBucketOf(t *testing.T) {
	for n := int64(0); n < 2*subBuckets; n++ {
		if bucketOf(n) != int(n) {
			t.Fatalf("bucketOf(%d) = %d, want exact", n, bucketOf(n))
		}
	}
	prev, lo := bucketOf(127), int64(127)
	for n := int64(128); n < 1<<22; n++ {
		b := bucketOf(n)
		switch {
		case b < prev || b > prev+1:
			t.Fatalf("bucketOf(%d) = %d after %d: not contiguous", n, b, prev)
		case b == prev+1:
			prev, lo = b, n
		case float64(n-lo) > float64(lo)/subBuckets:
			t.Fatalf("bucket %d spans %d..%d, wider than 1/%d", b, lo, n, subBuckets)
		}
	}
	if b := bucketOf(maxLength); b != 64+34*64 {
		t.Errorf("bucketOf(maxLength) = %d", b)
	}
}

// The product-limit estimate on data small enough to do by hand:
// finished at 3, 5, 5, 8; in flight at 4 and 9.
//
//	at 3: 6 at risk, 1 ends -> S = 5/6
//	at 5: 4 at risk (4 was censored), 2 end -> S = 5/6 · 2/4 = 5/12
//	at 8: 2 at risk, 1 ends -> S = 5/12 · 1/2 = 5/24
//	at 9: censored, S stays 5/24 and the tail takes over.
func TestKaplanMeierByHand(t *testing.T) {
	fit := lognormal{m: math.Log(11), s: 0.5}
	sv := buildSurvival(histOf(3, 5, 5, 8), []float64{4, 9}, fit, true, 0, 1)
	if sv == nil {
		t.Fatal("no survival curve")
	}
	for _, c := range []struct{ u, want float64 }{
		{0, 1}, {2.9, 1}, {3, 5.0 / 6}, {4.5, 5.0 / 6}, {5, 5.0 / 12}, {7.9, 5.0 / 12}, {8, 5.0 / 24}, {9, 5.0 / 24},
	} {
		near(t, "S("+strconv.FormatFloat(c.u, 'g', -1, 64)+")", sv.at(c.u), c.want, 1e-12)
	}
	near(t, "end", sv.end, 9, 0)
	// Area under S up to 9: 3·1 + 2·5/6 + 3·5/12 + 1·5/24 = 6.125.
	near(t, "area to 9", sv.areaTo(9), 6.125, 1e-12)
	// Beyond 9 the lognormal, conditioned on exceeding 9, scaled to 5/24.
	g9 := fit.surv(9)
	near(t, "S(20)", sv.at(20), 5.0/24*fit.surv(20)/g9, 1e-12)
	tail := 5.0 / 24 * numericTail(fit, 9, math.Inf(1)) / g9
	near(t, "mean", sv.mean(), 6.125+tail, 1e-3)
	near(t, "residual(4)", sv.residual(4), (sv.mean()-(3+5.0/6))/(5.0/6), 1e-9)

	// Without a tail the curve cannot be completed.
	if buildSurvival(histOf(3, 5, 5, 8), []float64{4, 9}, lognormal{}, false, 0, 1) != nil {
		t.Error("curve built with requests outliving every answer and no tail")
	}
}

func TestKaplanMeierWithoutCensoring(t *testing.T) {
	sv := buildSurvival(histOf(2, 4, 4, 10), nil, lognormal{}, false, 0, defaultMinRisk)
	if sv == nil {
		t.Fatal("no curve")
	}
	near(t, "S(3)", sv.at(3), 0.75, 1e-12)
	near(t, "S(4)", sv.at(4), 0.25, 1e-12)
	near(t, "S(10)", sv.at(10), 0, 0)
	near(t, "mean", sv.mean(), 5, 1e-12) // the plain mean
	near(t, "residual(4)", sv.residual(4), 6, 1e-12)
}

func TestKaplanMeierTiesAndSplice(t *testing.T) {
	// A request in flight at exactly 5 tokens was at risk when one ended at 5.
	sv := buildSurvival(histOf(5), []float64{5, 7}, lognormal{m: 2, s: 1}, true, 0, 1)
	near(t, "S(5) with a tie", sv.at(5), 2.0/3, 1e-12)

	// With 3 required at risk, the estimate stops at 5: at 6 only two remain.
	// S(5) = 6/7 · 5/6 · 4/5 · 3/4 · 2/3 = 2/7.
	sv = buildSurvival(histOf(1, 2, 3, 4, 5), []float64{6, 7}, lognormal{m: 2, s: 1}, true, 0, 3)
	near(t, "splice point", sv.end, 5, 0)
	near(t, "S at splice", sv.endSurv, 2.0/7, 1e-12)
	near(t, "continuity", sv.at(5+1e-9), 2.0/7, 1e-6)

	// An answer longer than every request in flight must not close the
	// curve when the requests before it were too few to trust: at 6 only
	// two are left (6 and 7) and 6 is still running, so the estimate stops
	// at 5 with S = 6/7 · 5/6 · 4/5 · 3/4 = 3/7 instead of dropping to 0 at 7.
	sv = buildSurvival(histOf(1, 2, 3, 4, 7), []float64{5, 6}, lognormal{m: 2, s: 1}, true, 0, 3)
	near(t, "splice before a lone long answer", sv.end, 5, 0)
	near(t, "S there", sv.endSurv, 3.0/7, 1e-12)
	if !(sv.at(7) > 0) {
		t.Error("curve closed at the lone long answer")
	}
}

func TestKaplanMeierLimit(t *testing.T) {
	// Answers truncated at 100 tokens: nothing is longer, the tail stops.
	fit := lognormal{m: math.Log(60), s: 1}
	sv := buildSurvival(histOf(10, 20, 100), []float64{30, 40, 50}, fit, true, 100, 1)
	near(t, "S(100)", sv.at(100), 0, 0)
	near(t, "S(150)", sv.at(150), 0, 0)
	if m := sv.mean(); m > 100 || m < 10 {
		t.Errorf("mean %.1f outside the possible lengths", m)
	}

	// Cutting an extrapolated tail at 80 tokens: nothing beyond, less mean.
	sv = buildSurvival(histOf(10, 20), []float64{30, 40, 50}, fit, true, 0, 1)
	near(t, "S(50)", sv.at(50), 4.0/5*3/4, 1e-12)
	within := sv.within(80)
	if s := within.at(70); !(s > 0) || math.Abs(s-sv.at(70)) > 1e-12 {
		t.Errorf("S(70) cut at 80 = %v, want %v", s, sv.at(70))
	}
	near(t, "S(80) cut at 80", within.at(80), 0, 0)
	if within.mean() >= sv.mean() {
		t.Errorf("cutting the tail did not shorten the mean")
	}
}

// numericTail integrates P(L > u) from a to b (b may be +Inf) under d by
// the trapezoid rule on a fine log grid.
func numericTail(d lognormal, a, b float64) float64 {
	hi := b
	if math.IsInf(b, 1) {
		hi = math.Expm1(d.m + 12*d.s)
	}
	const n = 200000
	sum := 0.0
	la, lb := math.Log1p(a), math.Log1p(hi)
	prevU, prevS := a, d.surv(a)
	for i := 1; i <= n; i++ {
		u := math.Expm1(la + (lb-la)*float64(i)/n)
		s := d.surv(u)
		sum += (u - prevU) * (s + prevS) / 2
		prevU, prevS = u, s
	}
	return sum
}

func TestLognormalIntegral(t *testing.T) {
	d := lognormal{m: math.Log(1500), s: 1}
	for _, c := range []struct{ a, b float64 }{
		{0, math.Inf(1)}, {1000, 16384}, {1000, math.Inf(1)}, {50000, math.Inf(1)}, {0, 10},
	} {
		want := numericTail(d, c.a, c.b)
		near(t, "integral", d.integral(c.a, c.b), want, 1e-4*math.Max(want, 1))
	}
	// The whole integral is the mean: e^(m+s²/2) − 1.
	near(t, "mean", d.integral(0, math.Inf(1)), math.Exp(d.m+0.5)-1, 1e-6)
	if v := d.integral(10, 5); v != 0 {
		t.Errorf("empty interval: %v", v)
	}
}

func TestMills(t *testing.T) {
	for _, a := range []float64{-5, -1, 0, 1, 3, 10} {
		phi := math.Exp(-a*a/2) / math.Sqrt(2*math.Pi)
		near(t, "mills", mills(a), phi/upperTail(a), 1e-9*math.Max(1, a))
	}
	near(t, "mills at the switch", mills(25.0001), mills(24.9999), 1e-3)
	if m := mills(1e6); math.IsNaN(m) || m < 1e6 {
		t.Errorf("mills(1e6) = %v", m)
	}
}

func TestFitRecoversCensoredLognormal(t *testing.T) {
	// 20,000 lengths, each observed only up to an independent point: a
	// third or so end up censored.
	rng := rand.New(rand.NewPCG(7, 7))
	const m, s = 7.3, 0.9
	var exact logMoments
	var cens []weightedLog
	for range 20000 {
		l := math.Round(math.Expm1(m + s*rng.NormFloat64()))
		c := math.Round(4000 * rng.Float64())
		if l <= c {
			exact.add(int64(l))
		} else {
			cens = append(cens, weightedLog{y: math.Log1p(c), w: 1})
		}
	}
	if float64(len(cens)) < 0.3*20000 {
		t.Fatalf("only %d censored: the test is not testing censoring", len(cens))
	}
	d, ok := fitLognormal(exact, cens, lognormal{}, false, spreadPrior{})
	if !ok {
		t.Fatal("no fit")
	}
	near(t, "m", d.m, m, 0.03)
	near(t, "s", d.s, s, 0.03)
	// The prior's 50 observations barely move a fit on 20,000.
	d2, _ := fitLognormal(exact, cens, d, true, defaultPrior)
	near(t, "m with prior", d2.m, m, 0.03)
	near(t, "s with prior", d2.s, s, 0.03)

	// Ignoring censoring, as a plain mean does, is far off.
	naive := exact.sum / exact.n
	if naive > m-0.3 {
		t.Errorf("uncensored mean of logs %.2f is not biased: the data do not test the fit", naive)
	}
}

func TestFitWithoutCensoring(t *testing.T) {
	var exact logMoments
	for _, n := range []int64{100, 200, 400, 800} {
		exact.add(n)
	}
	d, ok := fitLognormal(exact, nil, lognormal{}, false, spreadPrior{})
	if !ok {
		t.Fatal("no fit")
	}
	mean := exact.sum / exact.n
	near(t, "m", d.m, mean, 1e-9)
	near(t, "s", d.s, math.Sqrt(exact.sumSq/exact.n-mean*mean), 1e-9)
	if _, ok := fitLognormal(logMoments{}, []weightedLog{{y: 5, w: 1}}, lognormal{}, false, defaultPrior); ok {
		t.Error("fit from censored observations alone")
	}
	// All alike: the spread stays positive.
	var same logMoments
	for range 20 {
		same.add(1000)
	}
	if d, ok := fitLognormal(same, nil, lognormal{}, false, spreadPrior{}); !ok || d.s < minSigma {
		t.Errorf("fit of identical lengths: %+v %v", d, ok)
	}
}

func TestDrainOfEqualLengths(t *testing.T) {
	// Every answer 1,000 tokens: at a random moment a slot has a uniform
	// 0..1000 left, the longest of 3 averages 750 and one 500.
	lengths := make([]int64, 50)
	for i := range lengths {
		lengths[i] = 1000
	}
	sv := buildSurvival(histOf(lengths...), nil, lognormal{}, false, 0, defaultMinRisk)
	near(t, "drain of 3", drainPenalty(sv, 3), 250, 2.5)
	near(t, "drain of 1", drainPenalty(sv, 1), 0, 0)
	// Requests in flight at 200 and 700 tokens have 800 and 300 to go.
	sv = buildSurvival(histOf(lengths...), []float64{200, 700}, lognormal{}, false, 0, 1)
	near(t, "last finish", lastFinish(sv, []float64{200, 700}, 0), 800, 24)
	// A request not yet started has the whole 1,000 to go.
	near(t, "last finish with an unstarted one", lastFinish(sv, []float64{200, 700}, 1), 1000, 30)
}

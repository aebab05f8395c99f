package throughput

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The estimator reports how well length hints ranked the answers:
// Spearman's rank correlation, 1 for hints in the answers' order, about
// 0.7 for lognormal noise of σ 0.5 around the truth, about 0 for hints
// unrelated to the lengths, and nothing without hints. Ties share ranks,
// and the sample stays bounded at a large number of answers.
func TestHintRankCorrelation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name     string
		hint     func(length float64) float64
		lo, hi   float64
		answered int
	}{
		{"exact", func(l float64) float64 { return l }, 0.999, 1.0, 1000},
		{"noisy", func(l float64) float64 { return l * math.Exp(0.5*rng.NormFloat64()) }, 0.6, 0.8, 20000},
		{"unrelated", func(float64) float64 { return 1 + 1000*rng.Float64() }, -0.05, 0.05, 20000},
		{"reversed", func(l float64) float64 { return 1e6 / l }, -1.0, -0.999, 1000},
	}
	for _, c := range cases {
		e := New(Config{Run: "r", Total: c.answered}, simEpoch)
		for range c.answered {
			l := 100 * math.Exp(0.5*rng.NormFloat64())
			e.Completed(simEpoch, Answer{Requests: []Request{{CompletionTokens: int(l) + 1}}, LengthHint: max(int(c.hint(l)), 1)})
		}
		s := e.Snapshot(simEpoch.Add(time.Second))
		if s.HintedAnswers != c.answered || s.HintRankCorrelation < c.lo || s.HintRankCorrelation > c.hi {
			t.Errorf("%s: %d hinted, correlation %.3f; want %d and %.2f..%.2f", c.name, s.HintedAnswers, s.HintRankCorrelation, c.answered, c.lo, c.hi)
		}
		if len(e.hints.sample) > hintSample {
			t.Errorf("%s: %d pairs kept, want at most %d", c.name, len(e.hints.sample), hintSample)
		}
	}
	e := New(Config{Run: "r", Total: 3}, simEpoch)
	for _, l := range []int{10, 20, 30} {
		e.Completed(simEpoch, Single(l, false))
	}
	if s := e.Snapshot(simEpoch.Add(time.Second)); s.HintedAnswers != 0 || s.HintRankCorrelation != 0 {
		t.Errorf("no hints: %d hinted, correlation %v", s.HintedAnswers, s.HintRankCorrelation)
	}
	if got := pearson(ranks([]hintPair{{1, 5}, {1, 5}, {2, 6}}, func(p hintPair) float64 { return p.hint }), []float64{1, 2, 3}); math.Abs(got-math.Sqrt(0.75)) > 1e-9 {
		t.Errorf("tied ranks: correlation %v, want %v", got, math.Sqrt(0.75))
	}
}

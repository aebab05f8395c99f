package worker_test

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/throughput"
	"github.com/aerie-dev/aerie/worker"
)

// The answers of BenchmarkLongestFirst: lognormal with median 73 tokens
// and sigma 0.8, a mean of about 100 and the longest of 4,000 about
// 1,400 tokens, on the two servers of BenchmarkTwoBackendsMakespan.
const (
	orderMedian = 73
	orderSigma  = 0.8
	// orderHintNoise is the lognormal sigma of the noisy hints' error
	// around the true length: a rank correlation of about 0.7.
	orderHintNoise = 0.5
)

// orderSims are the servers of the benchmark with its answer lengths.
// With AERIE_ORDER_EQUAL set the slow server is as fast as the other: a
// fleet of equal servers, for comparison.
func orderSims() []simulator.Config {
	var sims []simulator.Config
	for _, sc := range makespanServers {
		c := makespanSim(sc)
		c.OutputMedian, c.OutputSigma = orderMedian, orderSigma
		if os.Getenv("AERIE_ORDER_EQUAL") != "" {
			c.StepBase = makespanServers[0].StepBase
		}
		sims = append(sims, c)
	}
	return sims
}

// plannedLengths returns the answer length the simulator of c gives each
// prompt: its lengths are drawn from the prompt and the seed alone, so
// whichever server answers, this is the answer's length.
func plannedLengths(b testing.TB, c simulator.Config, prompts []schema.Prompt) []int {
	b.Helper()
	v, err := simulator.NewVirtual(c)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]int, len(prompts))
	for i, p := range prompts {
		var msgs []simulator.Message
		for _, m := range p.Messages {
			msgs = append(msgs, simulator.Message{Role: m.Role, Content: m.Content})
		}
		r, err := v.Submit(i, msgs, 0)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = r.Length()
	}
	return out
}

// longestFirst returns prompts with their hints, in the order the
// producer queues them with --order longest-first: descending hint, ties
// in input order.
func longestFirst(prompts []schema.Prompt, hints []int) []schema.Prompt {
	out := slices.Clone(prompts)
	for i := range out {
		out[i].LengthHint = hints[i]
	}
	slices.SortStableFunc(out, func(a, b schema.Prompt) int { return cmp.Compare(b.LengthHint, a.LengthHint) })
	return out
}

// BenchmarkLongestFirst runs the 4,000 prompts of the mixed fleet with
// --window auto five ways, side by side in each iteration: in input
// order (no hints) with --hedge off and with --hedge auto; longest first
// by hints with lognormal noise of sigma 0.5 around the true length,
// with --hedge off and auto; and longest first by the true lengths. It
// reports each run's lower bound over its makespan, and beside it the
// makespan of the ideal length-blind dispatcher of the same answers in
// input order (bestFIFOMakespan), the best that any order-keeping
// schedule without hints or hedges could do, and for the hedged runs the
// share of the tokens generated twice.
func BenchmarkLongestFirst(b *testing.B) {
	sims := orderSims()
	prompts := brokertest.Prompts(makespanPrompts)
	lengths := plannedLengths(b, sims[0], prompts)
	rng := rand.New(rand.NewPCG(7, 11))
	noisy := make([]int, len(lengths))
	var acc throughput.HintAccuracy
	for i, l := range lengths {
		noisy[i] = max(1, int(math.Round(float64(l)*math.Exp(orderHintNoise*rng.NormFloat64()))))
		acc.Add(noisy[i], l)
	}
	corr, _ := acc.Correlation()
	blindIdeal := bestFIFOMakespan(lengths, sims)
	off, auto := worker.Config{AutoWindow: true, HedgeOff: true}, worker.Config{AutoWindow: true}
	runs := []struct {
		name, metric string
		cfg          worker.Config
		prompts      []schema.Prompt
		ratios       []float64
		twice        []float64
		// runs says what each iteration measured, logged once at the
		// end: a benchmark's log keeps only its first ten lines.
		runs []string
	}{
		{name: "input order, --hedge off", metric: "input-bound/makespan", cfg: off, prompts: prompts},
		{name: "input order, --hedge auto", metric: "hedged-bound/makespan", cfg: auto, prompts: prompts},
		{name: "longest first, noisy hints, --hedge off", metric: "noisy-bound/makespan", cfg: off, prompts: longestFirst(prompts, noisy)},
		{name: "longest first, noisy hints, --hedge auto", metric: "noisy-hedged-bound/makespan", cfg: auto, prompts: longestFirst(prompts, noisy)},
		{name: "longest first, true lengths, --hedge auto", metric: "perfect-bound/makespan", cfg: auto, prompts: longestFirst(prompts, lengths)},
	}
	if v := os.Getenv("AERIE_ORDER_RUNS"); v != "" {
		// Digits naming the runs above to run, from 0: "13" runs the two
		// hedged ones without hints or with noisy hints.
		var keep []int
		for _, c := range v {
			if i := int(c - '0'); i >= 0 && i < len(runs) {
				keep = append(keep, i)
			}
		}
		sel := runs[:0:0]
		for _, i := range keep {
			sel = append(sel, runs[i])
		}
		runs = sel
	}
	var bound float64 // the lower bound: the same answers in every run
	for b.Loop() {
		for i := range runs {
			r := &runs[i]
			m := runQueue(b, r.cfg, sims, r.prompts)
			bound = m.bound
			r.runs = append(r.runs, fmt.Sprintf("%.1fs (%.2f; an ideal dispatcher in this order %.1fs; last answers %v; handed back %d; hedges %d, won %d; twice %.2f%%)",
				m.makespan, m.ratio(), m.ideal, m.lastAnswers, m.handedBack, m.hedges, m.hedgesWon, 100*m.twice))
			r.ratios = append(r.ratios, m.ratio())
			r.twice = append(r.twice, m.twice)
		}
	}
	b.Logf("lower bound %.1fs; the ideal length-blind dispatcher in input order %.1fs (%.2f of the bound); noisy hints: rank correlation %.2f with the lengths",
		bound, blindIdeal, bound/blindIdeal, corr)
	for _, r := range runs {
		b.Logf("%s: %s", r.name, strings.Join(r.runs, "; "))
	}
	for _, r := range runs {
		b.ReportMetric(median(r.ratios), r.metric)
	}
	b.ReportMetric(100*median(runs[min(1, len(runs)-1)].twice), "hedged-%twice")
}

package throughput

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The heavy-tail study (docs/eta.md, "Heavy tails"): runs of 6,000
// prompts with a window of 200 whose answer lengths are lognormal with a
// mean of 300 tokens and a spread σ from 0.6 to 1.5, with and without a
// max_tokens cap, on two backends that decode differently:
//
//   - engine: the simulator's own engine, whose steps slow with the batch
//     and with the prefill of new prompts, played six times faster than
//     real time, as `aerie sim --speed 6` is (a run of a few minutes);
//   - constant: a server on which every request streams at its own fixed
//     speed whatever else runs (the synthetic backend of sim_test.go),
//     so that the last requests of a run gain nothing as the batch empties.
//
// The ETA is judged at 10%, 25%, 50% and 75% of each run's true length.

// tailCheckpoints are the shares of the run at which the ETA is judged.
var tailCheckpoints = []float64{0.10, 0.25, 0.50, 0.75}

// tailMean is the mean answer length of the study, in tokens.
const tailMean = 300

// tailCap is the max_tokens of the capped runs: about 1.4% of the
// answers reach it at σ 1.2.
const tailCap = 2048

// tailCase is one cell of the study.
type tailCase struct {
	backend string // "engine" or "constant"
	sigma   float64
	capped  bool
	// straggler gives one prompt, handed out late, an answer of
	// stragglerFactor times the mean: the run's end is set by it. On the
	// constant backend every request then streams at its own speed too
	// (stragglerSpeedSigma).
	straggler bool
}

// stragglerFactor is the straggler's length over the mean, and
// stragglerSpeedSigma the spread of the requests' own speeds on the
// constant backend of those cells: the run that showed the ETA short by
// 60% had one answer of 60 times the mean, started late, on a server
// whose requests each streamed at a steady speed of their own.
const (
	stragglerFactor     = 60
	stragglerSpeedSigma = 0.3
)

// stragglerAt is where the straggler goes in the queue: between 83% and
// 95% of it, by seed.
func stragglerAt(prompts int, seed int64) int {
	return int(float64(prompts) * (0.80 + 0.03*float64((seed-1)%5+1)))
}

func (c tailCase) String() string {
	cap := "none"
	if c.capped {
		cap = fmt.Sprint(tailCap)
	}
	late := ""
	if c.straggler {
		late = " with a late straggler"
	}
	return fmt.Sprintf("%s σ=%.1f max_tokens=%s%s", c.backend, c.sigma, cap, late)
}

// median is the lognormal median that gives the study's mean at c.sigma.
func (c tailCase) median() float64 { return tailMean * math.Exp(-c.sigma*c.sigma/2) }

// playTail plays one run of c and returns its points at tailCheckpoints.
func playTail(t testing.TB, c tailCase, seed int64) []studyPoint {
	t.Helper()
	maxTokens := 0
	if c.capped {
		maxTokens = tailCap
	}
	switch c.backend {
	case "engine":
		r := defaultStudyRun(6000, seed)
		r.sim.OutputSigma, r.sim.OutputMedian = c.sigma, int(math.Round(c.median()))
		r.maxTokens = maxTokens
		if c.straggler {
			r.straggler, r.stragglerAt = stragglerFactor*tailMean, stragglerAt(r.prompts, seed)
		}
		r.wall = 6
		r.heartbeat = time.Duration(float64(r.heartbeat) * r.wall)
		r.every = time.Duration(float64(r.every) * r.wall)
		res := playStudy(t, r)
		var out []studyPoint
		for _, share := range tailCheckpoints {
			out = append(out, res.checkpoint(share))
		}
		return out
	case "constant":
		cfg := simConfig{
			prompts: 6000, workers: 1, window: 200,
			speed: 60, prefill: 0.005,
			median: c.median(), sigma: c.sigma, maxTokens: math.MaxInt32,
			heartbeat: 2 * time.Second, snapshotEvery: 5 * time.Second,
			seed: uint64(seed),
		}
		if c.capped {
			cfg.maxTokens = maxTokens
		}
		if c.straggler {
			at := stragglerAt(cfg.prompts, seed)
			cfg.override = func(i int) float64 {
				if i == at {
					return stragglerFactor * tailMean
				}
				return 0
			}
			cfg.speedSigma = stragglerSpeedSigma
		}
		res := runSim(cfg)
		var out []studyPoint
		for _, share := range tailCheckpoints {
			row := res.rows[0]
			for _, r := range res.rows {
				if r.t > share*res.end {
					break
				}
				row = r
			}
			out = append(out, newStudyPoint(row.t, res.end, row.snap))
		}
		return out
	}
	t.Fatalf("unknown backend %q", c.backend)
	return nil
}

// tailResult is a cell's points over seeds: [seed][checkpoint].
type tailResult struct {
	c      tailCase
	points [][]studyPoint
}

// within counts the points whose ETA is within ±tol of the truth, those
// whose band holds it, and those where either holds.
func (r tailResult) within(tol float64) (close, covered, either, n int) {
	for _, ps := range r.points {
		for _, p := range ps {
			n++
			c := p.hasETA && math.Abs(p.err()) <= tol
			if c {
				close++
			}
			if p.covered {
				covered++
			}
			if c || p.covered {
				either++
			}
		}
	}
	return close, covered, either, n
}

// row formats r as a line of docs/eta.md's table.
func (r tailResult) row() string {
	var cells []string
	for k := range tailCheckpoints {
		var errs []float64
		cov := 0
		for _, ps := range r.points {
			errs = append(errs, ps[k].err())
			if ps[k].covered {
				cov++
			}
		}
		slices.Sort(errs)
		cells = append(cells, fmt.Sprintf("%+.0f%% (%+.0f…%+.0f) %d/%d", 100*errs[len(errs)/2], 100*errs[0], 100*errs[len(errs)-1], cov, len(errs)))
	}
	close, covered, either, n := r.within(0.25)
	backend := r.c.backend
	if r.c.straggler {
		backend += ", late straggler"
	}
	return fmt.Sprintf("| %s | %.1f | %s | %s | %d | %d | %d of %d |", backend, r.c.sigma, map[bool]string{true: fmt.Sprint(tailCap), false: "none"}[r.c.capped],
		strings.Join(cells, " | "), close, covered, either, n)
}

func runTails(t *testing.T, cases []tailCase, seeds int) []tailResult {
	var out []tailResult
	for _, c := range cases {
		r := tailResult{c: c}
		for s := range seeds {
			r.points = append(r.points, playTail(t, c, int64(s+1)))
		}
		out = append(out, r)
	}
	return out
}

const tailHeader = "| backend | σ | max_tokens | 10% | 25% | 50% | 75% | within ±25% | band holds | either |\n|---|---|---|---|---|---|---|---|---|---|"

// TestETAHeavyTails is the bounded heavy-tail study that make test runs:
// σ 0.6 and 1.2, capped and not, on both backends, and the engine at
// σ 1.5 with a cap, five seeds each. At
// each cell, the ETA must be within ±25% of the true remaining time, or
// its band must hold the true finish, at 80% or more of the checkpoints
// over the seeds. make eta-study adds σ 1.0 and 1.5, held to the same.
func TestETAHeavyTails(t *testing.T) {
	if testing.Short() {
		t.Skip("40 simulated runs")
	}
	sigmas, stragglerSigmas := []float64{0.6, 1.2}, []float64{1.2}
	if os.Getenv("AERIE_ETA_STUDY") != "" {
		sigmas, stragglerSigmas = []float64{0.6, 1.0, 1.2, 1.5}, []float64{1.2, 1.5}
	}
	var cases []tailCase
	for _, backend := range []string{"engine", "constant"} {
		for _, sigma := range sigmas {
			for _, capped := range []bool{false, true} {
				cases = append(cases, tailCase{backend: backend, sigma: sigma, capped: capped})
			}
		}
	}
	if os.Getenv("AERIE_ETA_STUDY") == "" {
		// The cell the prefill relief was measured for (see relief.go):
		// the engine's drain is most of its ETA's error.
		cases = append(cases, tailCase{backend: "engine", sigma: 1.5, capped: true})
	}
	for _, backend := range []string{"engine", "constant"} {
		for _, sigma := range stragglerSigmas {
			cases = append(cases, tailCase{backend: backend, sigma: sigma, straggler: true})
		}
	}
	if f := os.Getenv("AERIE_ETA_CELLS"); f != "" {
		cases = slices.DeleteFunc(cases, func(c tailCase) bool { return !strings.Contains(c.String(), f) })
	}
	results := runTails(t, cases, 5)
	lines := []string{"ETA error at each share of the run: median (range) and runs whose band holds the truth", "", tailHeader}
	for _, r := range results {
		lines = append(lines, r.row())
	}
	t.Log("\n" + strings.Join(lines, "\n"))
	for _, r := range results {
		if _, _, either, n := r.within(0.25); 5*either < 4*n {
			t.Errorf("%s: the ETA is within ±25%% of the truth or its band holds it at %d of %d checkpoints, want 80%%", r.c, either, n)
		}
	}
}

package throughput

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
)

// The ETA study (docs/eta.md): the simulator's own engine, with its
// default calibration (the reference run: Kimi-K2.5, about 1,000-token
// prompts, 200 concurrent requests), run in simulated time by a closed
// loop of clients shaped like one aerie worker, feeds the real Estimator
// with heartbeats and completions as a worker and the aggregator would;
// the ETA and its band are compared with the time the run really took.

// studyCheckpoints are the shares of the run's true length at which the
// ETA is judged.
var studyCheckpoints = []float64{0.01, 0.02, 0.05, 0.10, 0.25, 0.50}

// studyRun is one run of the study.
type studyRun struct {
	prompts   int
	clients   int           // one worker's window
	seed      int64         // the simulator's: changes every answer's length
	heartbeat time.Duration // worker heartbeat interval
	every     time.Duration // aggregator event interval
	// sparse, if set, keeps events every `every` only for the first
	// dense of the run and then takes them at these times alone: a
	// bounded run for make test (the estimator keeps no history of its
	// events beyond when the first wave turned over, which happens in
	// the first minutes).
	sparse []time.Duration
	dense  time.Duration
	// sim is the simulator's configuration (its Seed is seed); the zero
	// value is its default calibration.
	sim simulator.Config
	// maxTokens caps every request; zero leaves only the context length.
	maxTokens int
	// wall, above 1, plays the simulator at that speed: the estimator's
	// clock runs wall times slower than the engine's, as it does beside
	// `aerie sim --speed`, while heartbeat and every stay intervals of
	// the engine's time. Results stay in engine time (ETAs are scaled
	// back). Zero or 1: the estimator reads the engine's time.
	wall float64
	// straggler, above zero, is an answer of that many tokens given to
	// prompt stragglerAt: the run's end set by one late long answer.
	straggler, stragglerAt int
}

func defaultStudyRun(prompts int, seed int64) studyRun {
	return studyRun{prompts: prompts, clients: 200, seed: seed, heartbeat: 2 * time.Second, every: 5 * time.Second}
}

// studySnap is one throughput event of a study run.
type studySnap struct {
	t    float64 // seconds since the start
	snap schema.Throughput
}

// studyResult is a whole study run.
type studyResult struct {
	snaps []studySnap
	end   float64 // seconds: when the last answer finished
	// lastHandout is when the last prompt was sent.
	lastHandout float64
}

// studyPrompt is prompt i: distinct text of about 1,000 tokens, the
// prompt size the simulator's calibration assumes.
func studyPrompt(i int) []simulator.Message {
	head := fmt.Sprintf("prompt %d: ", i)
	return []simulator.Message{{Role: "user", Content: head + strings.Repeat("x", 3960-len(head))}}
}

// playStudy runs r through the simulator's engine in simulated time and
// an Estimator fed as the aggregator feeds it.
func playStudy(t testing.TB, r studyRun) studyResult {
	return playStudyTrace(t, r, nil)
}

func playStudyTrace(t testing.TB, r studyRun, after func()) studyResult {
	t.Helper()
	v, err := simulator.NewVirtual(r.simConfig())
	if err != nil {
		t.Fatal(err)
	}
	est := New(Config{Run: "study", Total: r.prompts, MaxTokens: r.maxTokens}, simEpoch)
	wall := max(r.wall, 1)
	clock := func(d time.Duration) time.Time { return simEpoch.Add(time.Duration(float64(d) / wall)) }
	active := map[int]*simulator.VirtualRequest{}
	sent := map[int]time.Duration{}
	next, done := 0, 0
	var streamed int64 // tokens of finished requests
	var end time.Duration
	var res studyResult
	submit := func() {
		if next >= r.prompts {
			return
		}
		var req *simulator.VirtualRequest
		var err error
		if r.straggler > 0 && next == r.stragglerAt {
			req, err = v.SubmitLength(next, studyPrompt(next), r.maxTokens, r.straggler)
		} else {
			req, err = v.Submit(next, studyPrompt(next), r.maxTokens)
		}
		if err != nil {
			t.Fatal(err)
		}
		active[next] = req
		sent[next] = v.Now()
		next++
	}
	v.OnFinish = func(req *simulator.VirtualRequest) {
		delete(active, req.ID)
		streamed += int64(req.Length())
		done++
		end = req.Finished
		est.Completed(clock(req.Finished), Single(req.Length(), req.Truncated()))
		submit()
		if next == r.prompts && res.lastHandout == 0 {
			res.lastHandout = req.Finished.Seconds()
		}
	}
	for range r.clients {
		submit()
	}
	hb, ev := r.heartbeat, r.every
	for done < r.prompts {
		at := min(hb, ev)
		v.AdvanceTo(at)
		if at == hb {
			h := schema.Heartbeat{Run: "study", Worker: "w0", Time: clock(at), Window: r.clients, InFlight: len(active)}
			tokens := streamed
			for _, id := range slices.Sorted(mapsKeys(active)) {
				c := active[id].Tokens()
				tokens += int64(c)
				h.InFlightTokens = append(h.InFlightTokens, c)
				h.InFlightMillis = append(h.InFlightMillis, (time.Duration(float64(at-sent[id]) / wall)).Milliseconds())
			}
			h.TokensStreamed = tokens
			h.Completed = int64(done)
			est.Heartbeat(h)
			hb += r.heartbeat
		}
		if at == ev {
			res.snaps = append(res.snaps, studySnap{t: at.Seconds(), snap: scaleETA(est.Snapshot(clock(at)), wall)})
			if after != nil {
				after()
			}
			ev = r.nextEvent(ev)
		}
		if at > 48*time.Hour {
			t.Fatalf("run did not finish: %d of %d done", done, r.prompts)
		}
	}
	res.end = end.Seconds()
	res.snaps = append(res.snaps, studySnap{t: res.end, snap: scaleETA(est.Snapshot(clock(end)), wall)})
	return res
}

// scaleETA returns s with its ETA and band in the engine's time: wall
// times the estimator's.
func scaleETA(s schema.Throughput, wall float64) schema.Throughput {
	for _, v := range []*float64{&s.ETASec, &s.ETALowSec, &s.ETAHighSec} {
		if *v > 0 {
			*v *= wall
		}
	}
	return s
}

// simConfig is the simulator's configuration for r.
func (r studyRun) simConfig() simulator.Config {
	c := r.sim
	c.Seed = r.seed
	return c
}

// nextEvent returns the time of the event after one at ev.
func (r studyRun) nextEvent(ev time.Duration) time.Duration {
	if r.sparse == nil || ev+r.every <= r.dense {
		return ev + r.every
	}
	for _, at := range r.sparse {
		if at > ev {
			return at
		}
	}
	return ev + time.Hour // past the last: the run ends first or an event every hour
}

// studyEnd returns when the last answer of r finishes: the engine alone,
// without the estimator, to place a sparse run's checkpoints.
func studyEnd(t testing.TB, r studyRun) time.Duration {
	t.Helper()
	v, err := simulator.NewVirtual(r.simConfig())
	if err != nil {
		t.Fatal(err)
	}
	next, done := 0, 0
	var end time.Duration
	submit := func() {
		if next < r.prompts {
			if _, err := v.Submit(next, studyPrompt(next), r.maxTokens); err != nil {
				t.Fatal(err)
			}
			next++
		}
	}
	v.OnFinish = func(req *simulator.VirtualRequest) {
		done++
		end = req.Finished
		submit()
	}
	for range r.clients {
		submit()
	}
	for at := time.Minute; done < r.prompts && at < 48*time.Hour; at += time.Minute {
		v.AdvanceTo(at)
	}
	return end
}

func mapsKeys(m map[int]*simulator.VirtualRequest) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// studyPoint is the ETA at one checkpoint of one run.
type studyPoint struct {
	t, truth        float64 // seconds since start; true remaining
	eta, low, high  float64
	completed       int
	covered, hasETA bool
}

// err is the ETA's relative error: (ETA − truth) / truth.
func (p studyPoint) err() float64 { return p.eta/p.truth - 1 }

// checkpoint returns the ETA of the last event at or before share of the
// run's true length.
func (r studyResult) checkpoint(share float64) studyPoint {
	return r.pointAt(share * r.end)
}

// pointAt returns the ETA of the last event at or before at seconds.
func (r studyResult) pointAt(at float64) studyPoint {
	s := r.snaps[0]
	for _, x := range r.snaps {
		if x.t > at {
			break
		}
		s = x
	}
	return newStudyPoint(s.t, r.end, s.snap)
}

// newStudyPoint is the point of snapshot s, taken at t seconds of a run
// that ended at end.
func newStudyPoint(t, end float64, s schema.Throughput) studyPoint {
	p := studyPoint{t: t, truth: end - t, eta: s.ETASec, low: s.ETALowSec, high: s.ETAHighSec, completed: s.Completed}
	p.hasETA = p.eta >= 0
	p.covered = p.hasETA && p.low <= p.truth && p.truth <= p.high
	return p
}

// studyTable is the study's result over seeds: per checkpoint, the errors
// and the band's coverage.
type studyTable struct {
	prompts int
	seeds   []int64
	ends    []float64
	points  [][]studyPoint // [checkpoint][seed]
	minutes [][]studyPoint // [minute-1][seed], the first minutes
}

// studyMinutes is how many of the first minutes the study reports on
// one by one: the ramp-up, when ETAs used to mislead most.
const studyMinutes = 5

func runStudy(t *testing.T, prompts int, seeds []int64, sparse bool) (tab studyTable) {
	var results []studyResult
	t.Helper()
	tab = studyTable{prompts: prompts, seeds: seeds, points: make([][]studyPoint, len(studyCheckpoints))}
	defer func() {
		for i, res := range results {
			if os.Getenv("AERIE_ETA_VERBOSE") != "" {
				p := res.checkpoint(0.5)
				t.Logf("seed %d drain %.0f implied est drain at 50%% %.0f", seeds[i], res.end-res.lastHandout, p.eta-(res.lastHandout-p.t))
			}
		}
	}()
	results = make([]studyResult, len(seeds))
	for i, seed := range seeds {
		r := defaultStudyRun(prompts, seed)
		// AERIE_ETA_SPEED plays the run as the simulator at that speed
		// would appear: heartbeats and events as often in wall time, so
		// that much less often in simulated time.
		speed := 1.0
		fmt.Sscan(os.Getenv("AERIE_ETA_SPEED"), &speed)
		r.heartbeat = time.Duration(float64(r.heartbeat) * speed)
		r.every = time.Duration(float64(r.every) * speed)
		if sparse {
			// Events every 5 s for the first five minutes, then at the
			// checkpoints only (the checkpoint picks the last event at or
			// before its time, so at exactly its time here).
			end := studyEnd(t, r)
			r.dense = 5 * time.Minute
			for _, share := range studyCheckpoints {
				r.sparse = append(r.sparse, time.Duration(share*float64(end)).Truncate(time.Millisecond))
			}
		}
		results[i] = playStudy(t, r)
	}
	for _, res := range results {
		tab.ends = append(tab.ends, res.end)
		for k, share := range studyCheckpoints {
			tab.points[k] = append(tab.points[k], res.checkpoint(share))
		}
		tab.minutes = slices.Grow(tab.minutes, studyMinutes)[:studyMinutes]
		for m := range studyMinutes {
			tab.minutes[m] = append(tab.minutes[m], res.pointAt(float64(60*(m+1))))
		}
	}
	return tab
}

// row summarises checkpoint k: median and worst error, coverage.
func (tab studyTable) row(k int) (median, worst float64, covered, n int) {
	return summarise(tab.points[k])
}

// summarise returns the median and worst error of points and how many
// of them the band covers.
func summarise(points []studyPoint) (median, worst float64, covered, n int) {
	var errs []float64
	for _, p := range points {
		if !p.hasETA {
			worst = math.Inf(1)
			continue
		}
		errs = append(errs, p.err())
		if math.Abs(p.err()) > math.Abs(worst) {
			worst = p.err()
		}
		if p.covered {
			covered++
		}
	}
	n = len(points)
	if len(errs) > 0 {
		slices.Sort(errs)
		median = errs[len(errs)/2]
		if len(errs)%2 == 0 {
			median = (errs[len(errs)/2-1] + errs[len(errs)/2]) / 2
		}
	}
	return median, worst, covered, n
}

// worstText shows the worst error, or how many runs had no ETA yet.
func worstText(worst float64, points []studyPoint) string {
	if !math.IsInf(worst, 0) {
		return fmt.Sprintf("%+.1f%%", worst*100)
	}
	none := 0
	for _, p := range points {
		if !p.hasETA {
			none++
		}
	}
	return fmt.Sprintf("no ETA yet in %d", none)
}

// format prints the table as docs/eta.md shows it.
func (tab studyTable) format() string {
	var b strings.Builder
	mean := 0.0
	for _, e := range tab.ends {
		mean += e
	}
	mean /= float64(len(tab.ends))
	fmt.Fprintf(&b, "%d prompts, %d seeds, runs of %.2f h on average\n\n", tab.prompts, len(tab.seeds), mean/3600)
	fmt.Fprintf(&b, "| at | elapsed | done | error, median | error, worst | band covers truth | band width, median |\n|---|---|---|---|---|---|---|\n")
	totalCov, totalN := 0, 0
	for k, share := range studyCheckpoints {
		med, worst, cov, n := tab.row(k)
		totalCov += cov
		totalN += n
		var widths []float64
		elapsed, completed := 0.0, 0
		for _, p := range tab.points[k] {
			elapsed += p.t / float64(n)
			completed += p.completed
			if p.hasETA {
				widths = append(widths, (p.high-p.low)/p.truth)
			}
		}
		slices.Sort(widths)
		w := math.NaN()
		if len(widths) > 0 {
			w = widths[len(widths)/2]
		}
		fmt.Fprintf(&b, "| %g%% | %s | %d | %+.1f%% | %s | %d of %d | %.0f%% |\n",
			share*100, (time.Duration(elapsed) * time.Second).Round(time.Second), completed/n, med*100, worstText(worst, tab.points[k]), cov, n, w*100)
	}
	fmt.Fprintf(&b, "\nband coverage over all checkpoints: %d of %d (%.0f%%)\n", totalCov, totalN, 100*float64(totalCov)/float64(totalN))
	if len(tab.minutes) > 0 {
		fmt.Fprintf(&b, "\nthe first minutes:\n\n| at | done | error, median | error, worst | band covers truth |\n|---|---|---|---|---|\n")
		for m, points := range tab.minutes {
			med, worst, cov, n := summarise(points)
			completed := 0
			for _, p := range points {
				completed += p.completed
			}
			fmt.Fprintf(&b, "| %d min | %d | %+.1f%% | %s | %d of %d |\n", m+1, completed/n, med*100, worstText(worst, points), cov, n)
		}
	}
	return b.String()
}

// perSeed lists every run's error at every checkpoint, a star marking
// those outside the band.
func (tab studyTable) perSeed() string {
	var b strings.Builder
	for i, seed := range tab.seeds {
		fmt.Fprintf(&b, "seed %3d (%.2f h):", seed, tab.ends[i]/3600)
		for k := range studyCheckpoints {
			p := tab.points[k][i]
			mark := " "
			if !p.covered {
				mark = "*"
			}
			fmt.Fprintf(&b, " %+6.1f%%%s", p.err()*100, mark)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// maxHighOverTruth bounds the band's high end at half way through the
// reference run, over the time really left: a band that reaches much
// further says nothing a person can plan by.
const maxHighOverTruth = 3.0

// highOverTruth returns the median and the largest of the band's high
// end over the true remaining time at the checkpoint share.
func (tab studyTable) highOverTruth(share float64) (median, worst float64) {
	k := slices.Index(studyCheckpoints, share)
	if k < 0 {
		return 0, 0
	}
	var r []float64
	for _, p := range tab.points[k] {
		if p.hasETA {
			r = append(r, p.high/p.truth)
		}
	}
	if len(r) == 0 {
		return 0, 0
	}
	slices.Sort(r)
	return r[len(r)/2], r[len(r)-1]
}

// checkHigh fails t when the band's high end at half way is more than
// maxHighOverTruth times the time left in any run, and logs the figures.
func (tab studyTable) checkHigh(t *testing.T) {
	median, worst := tab.highOverTruth(0.50)
	t.Logf("band's high end at 50%% over the true remaining time: median %.2f, largest %.2f", median, worst)
	if worst > maxHighOverTruth {
		t.Errorf("at 50%% of the run the band's high end reaches %.2f times the time left, want at most %.0f", worst, maxHighOverTruth)
	}
}

// TestETAStudy is the full study (make eta-study): the reference run's
// shape at its full 25,000 prompts, many seeds. It runs only when
// AERIE_ETA_STUDY is set; AERIE_ETA_PROMPTS and AERIE_ETA_SEEDS change
// the size, AERIE_ETA_FIRST_SEED the first seed (1), AERIE_ETA_SPEED
// the simulator speed whose heartbeats and events it imitates (1), and
// AERIE_ETA_VERBOSE lists every run.
func TestETAStudy(t *testing.T) {
	if os.Getenv("AERIE_ETA_STUDY") == "" {
		t.Skip("set AERIE_ETA_STUDY=1 (make eta-study)")
	}
	prompts, seeds := 25000, 20
	fmt.Sscan(os.Getenv("AERIE_ETA_PROMPTS"), &prompts)
	fmt.Sscan(os.Getenv("AERIE_ETA_SEEDS"), &seeds)
	first := int64(1)
	fmt.Sscan(os.Getenv("AERIE_ETA_FIRST_SEED"), &first)
	var ss []int64
	for i := range seeds {
		ss = append(ss, first+int64(i))
	}
	tab := runStudy(t, prompts, ss, false)
	t.Log("\n" + tab.format())
	tab.checkHigh(t)
	if os.Getenv("AERIE_ETA_VERBOSE") != "" {
		t.Log("\n" + tab.perSeed())
	}
}

// TestETAAccuracy is the bounded study run by make test: three seeds of
// the full-size reference run, events taken at the checkpoints only.
// From 2% of the run on, every ETA must be within 10% of the time the run
// really took to finish, and the band must hold the true finish at 80%
// of the checkpoints or more (1% included). The full study (make
// eta-study, docs/eta.md) shows the spread over many seeds.
func TestETAAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("three simulated five-hour runs")
	}
	tab := runStudy(t, 25000, []int64{1, 2, 3}, true)
	t.Log("\n" + tab.format() + "\n" + tab.perSeed())
	tab.checkHigh(t)
	covered, n := 0, 0
	for k, share := range studyCheckpoints {
		for i, p := range tab.points[k] {
			n++
			if p.covered {
				covered++
			}
			if share < 0.02 {
				continue
			}
			if !p.hasETA || math.Abs(p.err()) > 0.10 {
				t.Errorf("seed %d at %g%% of the run: ETA %.0f s, true remaining %.0f s (%+.1f%%)",
					tab.seeds[i], share*100, p.eta, p.truth, p.err()*100)
			}
		}
	}
	if float64(covered) < 0.8*float64(n) {
		t.Errorf("the band holds the true finish at %d of %d checkpoints, want at least 80%%", covered, n)
	}
}

// TestBandShape checks the band's contract on every event of a synthetic
// run: -1 with the ETA while there is none, the ETA itself once done,
// otherwise 0 <= low <= ETA <= high.
func TestBandShape(t *testing.T) {
	cfg := defaultSim()
	cfg.prompts = 1000
	res := runSim(cfg)
	widened := 0
	for _, row := range res.rows {
		s := row.snap
		switch {
		case s.ETASec < 0:
			if s.ETALowSec != -1 || s.ETAHighSec != -1 || s.ETASec != -1 {
				t.Fatalf("at %.0f s: no ETA, but band %v..%v (ETA %v)", row.t, s.ETALowSec, s.ETAHighSec, s.ETASec)
			}
		case s.Phase == schema.PhaseDone:
			if s.ETASec != 0 || s.ETALowSec != 0 || s.ETAHighSec != 0 {
				t.Fatalf("done, but ETA %v, band %v..%v", s.ETASec, s.ETALowSec, s.ETAHighSec)
			}
		default:
			if !(0 <= s.ETALowSec && s.ETALowSec <= s.ETASec && s.ETASec <= s.ETAHighSec) {
				t.Fatalf("at %.0f s (%s): band %v..%v does not hold ETA %v", row.t, s.Phase, s.ETALowSec, s.ETAHighSec, s.ETASec)
			}
			if s.ETAHighSec > s.ETALowSec {
				widened++
			}
		}
	}
	if widened == 0 {
		t.Error("the band is never wider than the ETA itself")
	}
}

package worker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// BenchmarkBackToBack queues two runs of makespanPrompts each at the
// start, on the two servers of BenchmarkTwoBackendsMakespan, and serves
// them with one --all-runs worker per server (--window auto). It reports
// the ideal dispatcher's makespan of their combined queue (first run's
// prompts then the second's, each to the first free slot, no time lost
// outside the servers: fifoMakespan with no hold) over the two runs'
// makespan together, and, on the same fleet, the makespan of the runs
// one after the other (a --run worker per server for the first, then for
// the second) over the makespan together. All in simulated seconds.
func BenchmarkBackToBack(b *testing.B) {
	var together, sequential []float64
	for b.Loop() {
		tg := runFleet(b, []string{"first", "second"}, true)
		first := runFleet(b, []string{"first"}, false)
		second := runFleet(b, []string{"second"}, false)
		seq := first.makespan + second.makespan
		b.Logf("speed %g: together %.0fs (each run's last answer at %v), ideal dispatcher %.0fs: %.3f of it (with the best tail hold %.0fs: %.3f); one after the other %.0fs + %.0fs = %.0fs: %.2f x together",
			makespanSpeed, tg.makespan, tg.lastOfRun, tg.ideal, tg.ideal/tg.makespan, tg.bestHold, tg.bestHold/tg.makespan, first.makespan, second.makespan, seq, seq/tg.makespan)
		together = append(together, tg.ideal/tg.makespan)
		sequential = append(sequential, seq/tg.makespan)
	}
	b.ReportMetric(median(together), "ideal/together")
	b.ReportMetric(median(sequential), "sequential/together")
}

type fleetRun struct {
	makespan  float64 // simulated seconds, from the workers' start to the last answer
	ideal     float64 // fifoMakespan of the answers in queue order
	bestHold  float64 // bestFIFOMakespan of them: the best tail hold too
	lastOfRun map[string]float64
}

// runFleet queues makespanPrompts prompts for each run, in order, and
// serves them with a worker per server: --all-runs when together, else
// --run for the one run given. Each run's prompts have their own ids, so
// that answer lengths, which the simulator draws from the prompt, differ
// between runs and are the same in every layout.
func runFleet(b *testing.B, runs []string, together bool) fleetRun {
	b.Helper()
	_, _, js := brokertest.Provisioned(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, run := range runs {
		if _, err := provision.WorkersConsumer(ctx, js, run, provision.Options{}); err != nil {
			b.Fatal(err)
		}
		brokertest.Queue(b, js, schema.Manifest{Run: run, Model: "test-model"}, runPrompts(run))
	}
	base := worker.Config{AutoWindow: true}
	if together {
		base.AllRuns = true
	} else {
		base.Run = runs[0]
	}
	ws, start, stop := startServers(b, js, base)
	want := int64(len(runs) * makespanPrompts)
	brokertest.Eventually(b, 20*time.Minute, func() bool {
		var n int64
		for _, w := range ws {
			n += w.Stats().Completed
		}
		return n >= want
	}, "every prompt answered")
	stop()

	r := fleetRun{lastOfRun: map[string]float64{}}
	tokens := map[string]map[string]int{}
	var last time.Time
	for _, data := range storedMessages(b, js, schema.ResultsStream) {
		res, err := schema.DecodeResult(data)
		if err != nil {
			b.Fatal(err)
		}
		if res.FinishedAt.After(last) {
			last = res.FinishedAt
		}
		at := res.FinishedAt.Sub(start).Seconds() * makespanSpeed
		r.lastOfRun[res.Run] = max(r.lastOfRun[res.Run], float64(int(at)))
		if tokens[res.Run] == nil {
			tokens[res.Run] = map[string]int{}
		}
		tokens[res.Run][res.ID] = res.CompletionTokens
	}
	r.makespan = last.Sub(start).Seconds() * makespanSpeed
	var queued []int
	for _, run := range runs {
		for _, p := range runPrompts(run) {
			queued = append(queued, tokens[run][p.ID])
		}
	}
	r.ideal = fifoMakespan(queued, makespanServers, 0)
	r.bestHold = bestFIFOMakespan(queued, makespanServers)
	return r
}

// runPrompts are makespanPrompts prompts with ids of their run.
func runPrompts(run string) []schema.Prompt {
	ps := brokertest.Prompts(makespanPrompts)
	for i := range ps {
		ps[i].ID = run + "-" + ps[i].ID
		ps[i].Messages[0].Content = "question " + ps[i].ID
	}
	return slices.Clip(ps)
}

// BenchmarkWeights runs two runs of weights 3 and 1 at once on the two
// servers, with one --runs worker per server (--window auto), and
// samples the tokens each run has been served. Once both are steady
// (after weightsWarmup), it reports the first run's share of the tokens
// over every 5-minute window (sliding by weightsStep), least and most;
// then it swaps the weights while the runs go on and reports how long
// the share over the last minute takes to come within 5 points of the
// new 25% and stay there until the end. Times are simulated.
func BenchmarkWeights(b *testing.B) {
	var low, high, settle []float64
	for b.Loop() {
		r := runWeights(b)
		b.Logf("speed %g, answer sigma %g: share of the weight-3 run over 5-minute windows %.1f%% to %.1f%% (%d windows); after the swap to 1:3, within 5 points of 25%% after %.0fs",
			makespanSpeed, makespanSigma, 100*r.least, 100*r.most, r.windows, r.settle)
		low, high, settle = append(low, r.least), append(high, r.most), append(settle, r.settle)
	}
	b.ReportMetric(100*median(low), "least-share-%")
	b.ReportMetric(100*median(high), "most-share-%")
	b.ReportMetric(median(settle), "swap-settle-s")
}

const (
	weightsWarmup = 2 * time.Minute  // simulated, before the share counts
	weightsSpan   = 10 * time.Minute // simulated, measured at 3:1
	weightsAfter  = 5 * time.Minute  // simulated, after the swap
	weightsWindow = 5 * time.Minute
	weightsStep   = 25 * time.Second
)

type weightsRun struct {
	least, most float64
	windows     int
	settle      float64 // simulated seconds from the swap
}

// tokenSample is the tokens each run had been served at a moment.
type tokenSample struct {
	at   time.Duration // simulated, since the workers started
	a, b int64
}

func runWeights(b *testing.B) weightsRun {
	b.Helper()
	_, _, js := brokertest.Provisioned(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// More prompts than the runs can answer in the time measured.
	const n = 16000
	for _, r := range []struct {
		run    string
		weight float64
	}{{"heavy", 3}, {"light", 1}} {
		if _, err := provision.WorkersConsumer(ctx, js, r.run, provision.Options{}); err != nil {
			b.Fatal(err)
		}
		ps := brokertest.Prompts(n)
		for i := range ps {
			ps[i].ID = r.run + "-" + ps[i].ID
			ps[i].Messages[0].Content = "question " + ps[i].ID
		}
		brokertest.Queue(b, js, schema.Manifest{Run: r.run, Model: "test-model", Schedule: schema.Schedule{Weight: r.weight}}, ps)
	}
	ws, start, stop := startServers(b, js, worker.Config{AutoWindow: true, Runs: []string{"heavy", "light"}})
	defer stop()
	sim := func() time.Duration { return time.Duration(float64(time.Since(start)) * makespanSpeed) }
	var samples []tokenSample
	sample := func() {
		s := tokenSample{at: sim()}
		for _, w := range ws {
			st := w.Stats().Runs
			s.a += st["heavy"].TokensStreamed
			s.b += st["light"].TokensStreamed
		}
		samples = append(samples, s)
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / makespanSpeed))
	defer tick.Stop()
	swapAt := weightsWarmup + weightsSpan
	swapped := false
	for sim() < swapAt+weightsAfter {
		<-tick.C
		sample()
		if !swapped && sim() >= swapAt {
			swapped = true
			one, three := 1.0, 3.0
			for run, w := range map[string]*float64{"heavy": &one, "light": &three} {
				if _, _, err := runs.SetSchedule(ctx, js, run, runs.ScheduleChange{Weight: w}, runs.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			swapAt = sim()
		}
	}
	stop()

	// share is the first run's share of the tokens served from t0 to t1.
	at := func(t time.Duration) tokenSample {
		i, _ := slices.BinarySearchFunc(samples, t, func(s tokenSample, t time.Duration) int { return int(s.at - t) })
		return samples[min(i, len(samples)-1)]
	}
	share := func(t0, t1 time.Duration) float64 {
		s0, s1 := at(t0), at(t1)
		a, c := float64(s1.a-s0.a), float64(s1.b-s0.b)
		if a+c == 0 {
			return 0
		}
		return a / (a + c)
	}
	r := weightsRun{least: 1}
	for t := weightsWarmup; t+weightsWindow <= swapAt; t += weightsStep {
		s := share(t, t+weightsWindow)
		r.least, r.most = min(r.least, s), max(r.most, s)
		r.windows++
	}
	end := samples[len(samples)-1].at
	r.settle = -1
	for t := swapAt + time.Minute; t <= end; t += weightsStep {
		if s := share(t-time.Minute, t); s < 0.20 || s > 0.30 {
			r.settle = -1
			continue
		}
		if r.settle < 0 {
			r.settle = (t - swapAt).Seconds()
		}
	}
	return r
}

// BenchmarkPriority fills the two servers with a run of priority 0 (one
// --all-runs worker per server, --window auto), then, once the fleet is
// steady, produces a run of priority 5. It reports, in mean answer
// times of the first run (measured from its answers before), how long
// the second took to its first answer, counted from the start of its
// produce, and the share of the requests at the servers it holds two
// mean answer times after its produce began. Times are simulated.
func BenchmarkPriority(b *testing.B) {
	var first, share []float64
	for b.Loop() {
		r := runPriority(b)
		b.Logf("speed %g: mean answer time %.0fs; the high-priority run's first answer %.0fs after its produce began (%.2f mean answer times); it held %.1f%% of the requests at the servers after two mean answer times",
			makespanSpeed, r.mean, r.first, r.first/r.mean, 100*r.share)
		first, share = append(first, r.first/r.mean), append(share, r.share)
	}
	b.ReportMetric(median(first), "first-answer/mean-answer")
	b.ReportMetric(100*median(share), "share-after-two-%")
}

type priorityRun struct {
	mean, first float64 // simulated seconds
	share       float64
}

func runPriority(b *testing.B) priorityRun {
	b.Helper()
	_, _, js := brokertest.Provisioned(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, run := range []string{"low", "high"} {
		if _, err := provision.WorkersConsumer(ctx, js, run, provision.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	brokertest.Queue(b, js, schema.Manifest{Run: "low", Model: "test-model"}, runPrompts("low"))
	ws, _, stop := startServers(b, js, worker.Config{AutoWindow: true, AllRuns: true})
	defer stop()
	sim := func(d time.Duration) time.Duration { return time.Duration(float64(d) / makespanSpeed) }
	simSince := func(t time.Time) float64 { return time.Since(t).Seconds() * makespanSpeed }
	// The fleet fills and turns over its first answers: a load phase.
	time.Sleep(sim(2 * time.Minute))
	var lat, n float64
	for _, data := range storedMessages(b, js, schema.ResultsStream) {
		res, err := schema.DecodeResult(data)
		if err != nil {
			b.Fatal(err)
		}
		lat += float64(res.LatencyMs) / 1000 * makespanSpeed
		n++
	}
	if n == 0 {
		b.Fatal("no answer of the first run in two simulated minutes")
	}
	r := priorityRun{mean: lat / n}
	completed := func(run string) int64 {
		var c int64
		for _, w := range ws {
			c += w.Stats().Runs[run].Completed
		}
		return c
	}
	// The first answer may come while the produce still publishes.
	firstAt := make(chan time.Time, 1)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go func() {
		t := time.NewTicker(sim(100 * time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-t.C:
			}
			if completed("high") > 0 {
				firstAt <- time.Now()
				return
			}
		}
	}()
	produced := time.Now()
	brokertest.Queue(b, js, schema.Manifest{Run: "high", Model: "test-model", Schedule: schema.Schedule{Priority: 5}}, runPrompts("high"))
	select {
	case at := <-firstAt:
		r.first = at.Sub(produced).Seconds() * makespanSpeed
	case <-time.After(10 * time.Minute):
		b.Fatal("no answer of the high-priority run in ten minutes")
	}
	for simSince(produced) < 2*r.mean {
		time.Sleep(sim(time.Second))
	}
	var high, low float64
	for _, w := range ws {
		st := w.Stats().Runs
		high += float64(st["high"].InFlight)
		low += float64(st["low"].InFlight)
	}
	if high+low > 0 {
		r.share = high / (high + low)
	}
	return r
}

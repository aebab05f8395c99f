package worker_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// Two servers of different speed and size, one worker each, as in the
// fleet the automatic window is for: a large fast one (384 sequences at
// 20 ms a token) and a small slow one (96 at 60 ms). Step times are flat
// (no per-sequence cost, no prefill), so that a server's capacity is
// exactly its sequences over the time an answer takes.
const makespanPrompts = 4000

// makespanSpeed is the servers' speed: 5 unless AERIE_MAKESPAN_SPEED says
// otherwise. The worker must keep up with servers this much faster than
// real ones (about 70 prompts/s at 5); on a machine too busy to, the
// servers starve and the ratios measure the machine: lower it.
var makespanSpeed = func() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("AERIE_MAKESPAN_SPEED"), 64); err == nil && v > 0 {
		return v
	}
	return 5
}()

// benchEngine is the engine whose dialect the benchmarks' simulators
// speak and whose profile their workers use: vLLM unless
// AERIE_BENCH_ENGINE names another (docs/engines.md).
var benchEngine = func() engine.Profile {
	p, err := engine.Lookup(os.Getenv("AERIE_BENCH_ENGINE"))
	if err != nil {
		return engine.Default()
	}
	return p
}()

var makespanServers = []simulator.Config{
	{Model: "test-model", MaxNumSeqs: 384, StepBase: 20 * time.Millisecond},
	{Model: "test-model", MaxNumSeqs: 96, StepBase: 60 * time.Millisecond},
}

// makespanSigma is the answers' lognormal sigma: 0.3 unless
// AERIE_BENCH_SIGMA says otherwise (the simulator's default, 0.95, is a
// heavy tail).
var makespanSigma = func() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("AERIE_BENCH_SIGMA"), 64); err == nil && v > 0 {
		return v
	}
	return 0.3
}()

// makespanSim is a server of the benchmark at its speed. Answers are
// lognormal about 1,400 tokens with sigma makespanSigma, 0.3 by default
// (the longest of 4,000 about 4,000 tokens): with a heavier tail one
// answer alone is the lower bound.
func makespanSim(c simulator.Config) simulator.Config {
	c.Speed = makespanSpeed
	c.Engine = string(benchEngine.Name)
	c.StepPerSeq, c.PrefillPerToken = -1, -1
	c.OutputSigma = makespanSigma
	c.ReasoningShare = -1
	return c
}

// BenchmarkTwoBackendsMakespan runs 4,000 prompts through the two
// servers with a fixed window of 200 per worker and with --window auto,
// side by side in each iteration, and reports each run's lower bound
// over its makespan (1 is perfect). The lower bound is the larger of
//
//   - n over the servers' summed capacity: a server of S sequences at
//     t seconds a token, answering a mean of T tokens (the answers'
//     actual completion tokens, which the simulator draws per prompt
//     whichever server answers), completes S / (T x t) prompts a
//     second at best;
//   - the longest answer's tokens times the faster server's step time:
//     no schedule finishes before it.
//
// No schedule blind to answer lengths reaches that bound: the run ends
// with the longest of the answers still running when the queue empties.
// So the benchmark also reports, for the auto run, the bound over the
// makespan of an ideal dispatcher of the same answers in the same order
// (bestFIFOMakespan: no time lost outside the servers, the best tail
// hold) and that ideal makespan over aerie's: how much of what such a
// schedule could do aerie does.
//
// Makespans run from the workers' start to the last answer's end; all
// figures are in simulated seconds (wall time x speed).
func BenchmarkTwoBackendsMakespan(b *testing.B) {
	var fixed, auto, ideal, ofIdeal []float64
	for b.Loop() {
		f := runMakespan(b, worker.Config{Window: worker.DefaultWindow})
		a := runMakespan(b, worker.Config{AutoWindow: true})
		for _, r := range []struct {
			name string
			makespanRun
		}{{"fixed 200", f}, {"auto", a}} {
			b.Logf("%s, speed %g, %s: makespan %.0fs (half answered at %.0fs, 95%% at %.0fs; each server's last answer at %v), lower bound %.0fs: %.2f; ideal length-blind schedule %.0fs: %.2f of it; handed back %d; held back %d times; final windows %v",
				benchEngine.Title, makespanSpeed, r.name, r.makespan, r.half, r.most, r.lastAnswers, r.bound, r.ratio(), r.ideal, r.ideal/r.makespan, r.handedBack, r.holds, r.windows)
		}
		fixed, auto = append(fixed, f.ratio()), append(auto, a.ratio())
		ideal, ofIdeal = append(ideal, a.bound/a.ideal), append(ofIdeal, a.ideal/a.makespan)
	}
	b.ReportMetric(median(fixed), "fixed200-bound/makespan")
	b.ReportMetric(median(auto), "auto-bound/makespan")
	b.ReportMetric(median(ideal), "ideal-bound/makespan")
	b.ReportMetric(median(ofIdeal), "auto-ideal/makespan")
}

type makespanRun struct {
	makespan, bound float64 // simulated seconds
	half, most      float64 // when half and 95% were answered
	handedBack      int64
	holds           int64 // times a worker began to hold back for the tail
	windows         []int
	lastAnswers     lastAnswers // when each server's last answer ended
	// ideal is bestFIFOMakespan of the run's own answers, in queue order.
	ideal float64
	// hedges and hedgesWon count the hedges sent and won; twice is the
	// share of the tokens streamed that were generated twice and thrown
	// away.
	hedges, hedgesWon int64
	twice             float64
}

func (r makespanRun) ratio() float64 { return r.bound / r.makespan }

// lastAnswers are when each server's last answer ended, in simulated
// seconds: NaN for a server that answered nothing.
type lastAnswers []float64

// String says "none" for a server that answered nothing.
func (l lastAnswers) String() string {
	parts := make([]string, len(l))
	for i, at := range l {
		parts[i] = "none"
		if !math.IsNaN(at) {
			parts[i] = fmt.Sprintf("%.1fs", at)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func runMakespan(b *testing.B, base worker.Config) makespanRun {
	b.Helper()
	var sims []simulator.Config
	for _, sc := range makespanServers {
		sims = append(sims, makespanSim(sc))
	}
	return runQueue(b, base, sims, brokertest.Prompts(makespanPrompts))
}

// runQueue is runMakespan of prompts, queued in their order, on servers
// of makespanServers' sizes and speeds configured as sims.
func runQueue(b *testing.B, base worker.Config, sims []simulator.Config, prompts []schema.Prompt) makespanRun {
	b.Helper()
	_, _, js := brokertest.Provisioned(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const run = "makespan"
	if _, err := provision.WorkersConsumer(ctx, js, run, provision.Options{}); err != nil {
		b.Fatal(err)
	}
	brokertest.Queue(b, js, schema.Manifest{Run: run, Model: "test-model"}, prompts)

	base.Run = run
	ws, start, stop := startSims(b, js, base, sims)
	done := func() bool {
		var n int64
		for _, w := range ws {
			n += w.Stats().Completed
		}
		return n >= int64(len(prompts))
	}
	brokertest.Eventually(b, 10*time.Minute, done, "every prompt answered")
	stop()
	r := makespanRun{}
	var streamed, thrown int64
	for _, w := range ws {
		s := w.Stats()
		r.handedBack += s.TailHandedBack
		r.holds += s.TailHolds
		r.windows = append(r.windows, s.Window)
		r.hedges += s.Hedges
		r.hedgesWon += s.HedgesWon
		streamed += s.TokensStreamed
		thrown += s.HedgedTokens
	}
	if streamed > 0 {
		r.twice = float64(thrown) / float64(streamed)
	}

	var ends []time.Time
	var tokens, longest int
	lastBy := map[string]time.Time{}
	byID := map[string]int{}
	for _, data := range storedMessages(b, js, schema.ResultsStream) {
		res, err := schema.DecodeResult(data)
		if err != nil {
			b.Fatal(err)
		}
		ends = append(ends, res.FinishedAt)
		if res.FinishedAt.After(lastBy[res.Worker]) {
			lastBy[res.Worker] = res.FinishedAt
		}
		tokens += res.CompletionTokens
		byID[res.ID] = res.CompletionTokens
		longest = max(longest, res.CompletionTokens)
	}
	slices.SortFunc(ends, time.Time.Compare)
	last := ends[len(ends)-1]
	at := func(q float64) float64 { return ends[int(q*float64(len(ends)-1))].Sub(start).Seconds() * makespanSpeed }
	r.half, r.most = at(0.5), at(0.95)
	for i := range sims {
		at, ok := lastBy[fmt.Sprintf("server%d", i)]
		r.lastAnswers = append(r.lastAnswers, math.NaN())
		if ok {
			r.lastAnswers[i] = at.Sub(start).Seconds() * makespanSpeed
		}
	}
	mean := float64(tokens) / float64(len(prompts))
	var capacity float64 // prompts per simulated second
	fastest := sims[0].StepBase
	for _, sc := range sims {
		capacity += float64(sc.MaxNumSeqs) / (mean * sc.StepBase.Seconds())
		fastest = min(fastest, sc.StepBase)
	}
	r.bound = max(float64(len(prompts))/capacity, float64(longest)*fastest.Seconds())
	r.makespan = last.Sub(start).Seconds() * makespanSpeed
	queued := make([]int, 0, len(prompts))
	for _, p := range prompts {
		queued = append(queued, byID[p.ID])
	}
	r.ideal = bestFIFOMakespan(queued, sims)
	return r
}

// startServers starts a worker of base, named server<i>, for each of
// makespanServers, and returns them, when they started, and a function
// that stops them and waits until they have. Every period a worker keeps
// is scaled by the servers' speed, as aerie run does against its
// simulator.
func startServers(b *testing.B, js jetstream.JetStream, base worker.Config) ([]*worker.Worker, time.Time, func()) {
	b.Helper()
	var sims []simulator.Config
	for _, sc := range makespanServers {
		sims = append(sims, makespanSim(sc))
	}
	return startSims(b, js, base, sims)
}

// startSims is startServers with the servers' configurations given.
func startSims(b *testing.B, js jetstream.JetStream, base worker.Config, sims []simulator.Config) ([]*worker.Worker, time.Time, func()) {
	b.Helper()
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) / makespanSpeed) }
	base.Logger = quiet
	base.WindowPoll = scale(worker.DefaultWindowPoll)
	base.HandBackAfter = scale(worker.DefaultHandBackAfter)
	base.Heartbeat = scale(worker.DefaultHeartbeat)
	base.PullWait = scale(worker.DefaultPullWait)
	var ws []*worker.Worker
	for i, sc := range sims {
		client, err := openai.New(openai.Config{BaseURL: simtest.Serve(b, sc), Dialect: benchEngine.Dialect})
		if err != nil {
			b.Fatal(err)
		}
		cfg := base
		cfg.Name = fmt.Sprintf("server%d", i)
		cfg.LoadMetrics = benchEngine.Load
		w, err := worker.New(cfg, js, client)
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				b.Error(err)
			}
		}()
	}
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	b.Cleanup(stop)
	return ws, start, stop
}

// storedMessages returns the payloads of every message in stream, in
// order.
func storedMessages(b testing.TB, js jetstream.JetStream, stream string) [][]byte {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var out [][]byte
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, m.Data)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

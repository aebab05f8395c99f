package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/probe"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// The server of BenchmarkServing: 128 sequences at 20 ms a token, flat
// steps and free prompts, so that a time to first token is the queue in
// front of the engine plus a step; vLLM's priority policy.
var servingServer = simulator.Config{Model: "test-model", MaxNumSeqs: 128, StepBase: 20 * time.Millisecond,
	StepPerSeq: -1, PrefillPerToken: -1, OutputSigma: 0.3, ReasoningShare: -1,
	SchedulingPolicy: simulator.SchedulingPriority}

const (
	servingRate    = 2.0 // interactive requests a simulated second
	servingWarm    = time.Minute
	servingMeasure = 2 * time.Minute
)

// BenchmarkServing measures what a batch run does to interactive users
// of its server: a probe at 2 requests a simulated second on the idle
// server, then beside a batch run (one worker, --window auto) without
// and with --yield-to-serving; and the batch run's token rate alone and
// in each case. It reports the probe's p95 time to first token over the
// idle server's, and the batch's rate over its rate alone, with and
// without yielding. Times are simulated (wall x makespanSpeed).
func BenchmarkServing(b *testing.B) {
	var yieldTTFT, yieldRate, plainTTFT, plainRate []float64
	for b.Loop() {
		idle := servingPhase(b, false, false, true)
		alone := servingPhase(b, true, false, false)
		plain := servingPhase(b, true, false, true)
		yield := servingPhase(b, true, true, true)
		b.Logf("%s, speed %g: probe p95 time to first token idle %v; batch alone %.0f tok/s; without yielding: probe p95 %v (%.2f x idle), batch %.0f tok/s (%.2f of alone); with --yield-to-serving: probe p95 %v (%.2f x idle), batch %.0f tok/s (%.2f of alone), window cap at the end %d",
			benchEngine.Title, makespanSpeed, idle.p95, alone.rate, plain.p95, ratio(plain.p95, idle.p95), plain.rate, plain.rate/alone.rate,
			yield.p95, ratio(yield.p95, idle.p95), yield.rate, yield.rate/alone.rate, yield.window)
		plainTTFT, plainRate = append(plainTTFT, ratio(plain.p95, idle.p95)), append(plainRate, plain.rate/alone.rate)
		yieldTTFT, yieldRate = append(yieldTTFT, ratio(yield.p95, idle.p95)), append(yieldRate, yield.rate/alone.rate)
	}
	b.ReportMetric(median(yieldTTFT), "yield-p95/idle")
	b.ReportMetric(median(yieldRate), "yield-rate/alone")
	b.ReportMetric(median(plainTTFT), "plain-p95/idle")
	b.ReportMetric(median(plainRate), "plain-rate/alone")
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

type servingResult struct {
	p95    time.Duration // simulated
	rate   float64       // batch tokens a simulated second
	window int
}

// servingPhase runs the server for servingWarm then servingMeasure
// (simulated), with a batch run when batch (yielding when yield) and the
// probe over the measured span when probing.
func servingPhase(b *testing.B, batch, yield, probing bool) servingResult {
	b.Helper()
	url := simtest.Serve(b, makespanSim(servingServer))
	sim := func(d time.Duration) time.Duration { return time.Duration(float64(d) / makespanSpeed) }
	var w *worker.Worker
	if batch {
		_, _, js := brokertest.Provisioned(b)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := provision.WorkersConsumer(ctx, js, "batch", provision.Options{}); err != nil {
			b.Fatal(err)
		}
		// More than the server answers in the phase.
		brokertest.Queue(b, js, schema.Manifest{Run: "batch", Model: "test-model"}, brokertest.Prompts(2000))
		client, err := openai.New(openai.Config{BaseURL: url, Dialect: benchEngine.Dialect})
		if err != nil {
			b.Fatal(err)
		}
		cfg := worker.Config{Run: "batch", Name: "batch", AutoWindow: true, YieldToServing: yield, Logger: quiet, LoadMetrics: benchEngine.Load,
			WindowPoll: sim(worker.DefaultWindowPoll), Heartbeat: sim(worker.DefaultHeartbeat), PullWait: sim(worker.DefaultPullWait),
			HandBackAfter: -1}
		if w, err = worker.New(cfg, js, client); err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(runCtx) }()
		defer func() { stop(); <-done }()
	}
	time.Sleep(sim(servingWarm)) // the batch fills the server: a load phase, not synchronisation
	var before int64
	if w != nil {
		before = w.Stats().TokensStreamed
	}
	start := time.Now()
	var rep probe.Report
	if probing {
		client, err := openai.New(openai.Config{BaseURL: url})
		if err != nil {
			b.Fatal(err)
		}
		if rep, err = probe.Run(context.Background(), client, probe.Config{Rate: servingRate * makespanSpeed, Duration: sim(servingMeasure), Model: "test-model", Seed: 7}); err != nil {
			b.Fatal(err)
		}
	} else {
		time.Sleep(sim(servingMeasure))
	}
	r := servingResult{p95: time.Duration(float64(rep.P95) * makespanSpeed)}
	if w != nil {
		s := w.Stats()
		r.rate = float64(s.TokensStreamed-before) / (time.Since(start).Seconds() * makespanSpeed)
		r.window = s.Window
	}
	if probing && rep.Failed > 0 {
		b.Fatalf("probe: %v", rep)
	}
	return r
}

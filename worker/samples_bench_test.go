package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// oneAnswer is a backend that never asks for several answers in one
// request: a server without n, as the worker sees it.
type oneAnswer struct{ worker.Backend }

func (o oneAnswer) ChatStream(ctx context.Context, req openai.ChatRequest, progress openai.Progress) (*openai.Completion, error) {
	req.N = 0
	return o.Backend.ChatStream(ctx, req, progress)
}

// samplesBench is one way of answering 4 samples of each prompt.
type samplesBench struct {
	name string
	// perMessage is the manifest's SamplesPerMessage: 4 queues a
	// prompt's samples in one message, 0 one message each.
	perMessage int
	// separate makes the worker's backend answer one sample a request;
	// servers is how many servers (one worker each) share the run;
	// noCache turns the servers' prefix cache off.
	separate, noCache bool
	servers           int
	samples           int
}

// BenchmarkSamplesPrefill measures the prompt tokens the servers read
// (prefilled: prefix cache queries less hits) for 200 prompts of about
// 500 tokens and 4 samples each, against one sample each, side by side:
// the samples in one request (n), with and without the servers' prefix
// cache (vLLM's V1 engine shares a prompt between the answers of one
// request through that cache); as 4 requests from the worker that holds
// the message (a backend without n), with and without it; and as 4
// messages on a fleet of two servers, where samples of a prompt go to
// either. It reports each as a multiple of the single sample's.
func BenchmarkSamplesPrefill(b *testing.B) {
	ways := []samplesBench{
		{name: "one sample", samples: 1, servers: 1},
		{name: "4 samples in one request (n)", samples: 4, perMessage: 4, servers: 1},
		{name: "4 samples in one request (n), no prefix cache", samples: 4, perMessage: 4, servers: 1, noCache: true},
		{name: "4 requests from one worker, prefix cache", samples: 4, perMessage: 4, servers: 1, separate: true},
		{name: "4 requests from one worker, no prefix cache", samples: 4, perMessage: 4, servers: 1, separate: true, noCache: true},
		{name: "4 messages on two servers, prefix cache", samples: 4, servers: 2},
	}
	ratios := make([][]float64, len(ways))
	for b.Loop() {
		var base float64
		for i, way := range ways {
			prefilled := runSamples(b, way)
			if i == 0 {
				base = prefilled
			}
			ratios[i] = append(ratios[i], prefilled/base)
			b.Logf("%s: %.0f prompt tokens prefilled, %.2f x one sample", way.name, prefilled, prefilled/base)
		}
	}
	for i, way := range ways[1:] {
		b.ReportMetric(median(ratios[i+1]), strings.NewReplacer(" ", "-", ",", "", "(", "", ")", "").Replace(way.name)+"/one")
	}
}

// runSamples runs 200 prompts the way way says and returns the prompt
// tokens its servers prefilled.
func runSamples(b *testing.B, way samplesBench) float64 {
	b.Helper()
	const prompts = 200
	_, _, js := brokertest.Provisioned(b)
	run := "prefill"
	m := schema.Manifest{Run: run, Model: "test-model", Samples: way.samples, SamplesPerMessage: way.perMessage,
		Total: prompts * way.samples, Params: schema.Params{Seed: ptr(int64(1)), Temperature: ptr(0.7)}}
	var ps []schema.Prompt
	for i := range prompts {
		p := schema.Prompt{ID: fmt.Sprintf("p%04d", i),
			Messages: []schema.Message{{Role: "user", Content: strings.Repeat(fmt.Sprintf("context %d of the question ", i), 100)}}}
		if way.perMessage > 1 {
			p.Samples = way.perMessage
			ps = append(ps, p)
			continue
		}
		for k := range way.samples {
			p.Sample = k
			ps = append(ps, p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := provision.WorkersConsumer(ctx, js, run, provision.Options{}); err != nil {
		b.Fatal(err)
	}
	brokertest.Queue(b, js, m, ps)
	cfg := simulator.Config{Model: "test-model", Speed: 500, OutputMedian: 20, OutputSigma: 0.3}
	if way.noCache {
		cfg.PrefixCache = -1
	}
	var urls []string
	var ws []*worker.Worker
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{}, way.servers)
	for i := range way.servers {
		url := simtest.Serve(b, cfg)
		urls = append(urls, url)
		client, err := openai.New(openai.Config{BaseURL: url})
		if err != nil {
			b.Fatal(err)
		}
		var backend worker.Backend = client
		if way.separate {
			backend = oneAnswer{client}
		}
		w, err := worker.New(worker.Config{Run: run, Name: fmt.Sprintf("w%d", i), Window: 32, Logger: quiet,
			PullWait: 200 * time.Millisecond, Heartbeat: 200 * time.Millisecond, WindowPoll: 200 * time.Millisecond}, js, backend)
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
		go func() { _ = w.Run(runCtx); done <- struct{}{} }()
	}
	brokertest.Eventually(b, 5*time.Minute, func() bool {
		var n int64
		for _, w := range ws {
			n += w.Stats().Completed
		}
		return n >= int64(prompts*way.samples)
	}, "every sample answered")
	stop()
	for range ws {
		<-done
	}
	var prefilled float64
	for _, url := range urls {
		if way.noCache {
			prefilled += scrapeMetric(b, url, "vllm:prompt_tokens_total")
			continue
		}
		prefilled += scrapeMetric(b, url, "vllm:prefix_cache_queries_total") - scrapeMetric(b, url, "vllm:prefix_cache_hits_total")
	}
	return prefilled
}

package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
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

// samplesRun is a run of n prompts, each one message of four samples,
// with a seed.
func samplesRun(t *testing.T, n int, opts provision.Options) (*bundle, schema.Manifest) {
	t.Helper()
	const samples = 4
	m := schema.Manifest{Run: "samples", Samples: samples, SamplesPerMessage: samples, Total: n * samples,
		Params: schema.Params{Seed: ptr(int64(10)), Temperature: ptr(0.8)}}
	var prompts []schema.Prompt
	for i := range n {
		prompts = append(prompts, schema.Prompt{ID: fmt.Sprintf("p%d", i), Samples: samples,
			Messages: []schema.Message{{Role: "user", Content: strings.Repeat(fmt.Sprintf("question %d ", i), 30)}}})
	}
	return setupUnits(t, m, prompts, opts), m
}

// countingBackend counts the requests sent through it.
type countingBackend struct {
	worker.Backend
	requests atomic.Int64
}

func (c *countingBackend) ChatStream(ctx context.Context, req openai.ChatRequest, progress openai.Progress) (*openai.Completion, error) {
	c.requests.Add(1)
	return c.Backend.ChatStream(ctx, req, progress)
}

// scrapeMetric reads one counter of a simulator's /metrics.
func scrapeMetric(t testing.TB, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// A message of four samples is answered in one request (n): every
// sample gets its own result, sample k the answer a request of its own
// with the seed plus k gets, and the server reads each prompt once.
func TestSamplesInOneRequest(t *testing.T) {
	const n = 5
	b, m := samplesRun(t, n, provision.Options{})
	url := simtest.Serve(t, simulator.Config{Model: "test-model", Speed: 200, OutputMedian: 30, OutputSigma: 0.3})
	client, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingBackend{Backend: client}
	w, _ := b.startBackend(t, worker.Config{Window: 8}, counted)
	b.waitSettled(t, 30*time.Second)
	waitCounted(t, n*4, w)
	res := b.unitResults(t)
	if len(res) != n*4 {
		t.Fatalf("%d results, want %d", len(res), n*4)
	}
	// One request a prompt, and the one that asked whether n is served.
	if got := counted.requests.Load(); got != n+1 {
		t.Errorf("%d requests, want one a prompt and the test of n: %d", got, n+1)
	}
	for k := range 4 {
		r := res[schema.Unit{ID: "p0", Sample: k}.Key()]
		if r == nil || r.Params.Seed == nil || *r.Params.Seed != 10+int64(k) {
			t.Fatalf("sample %d: %+v", k, r)
		}
		seed := *r.Params.Seed
		alone, err := client.ChatStream(context.Background(), worker.Request(&m,
			[]openai.Message{{Role: "user", Content: r.Messages[0].Content}}, schema.Params{Seed: &seed, Temperature: m.Params.Temperature}), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Content != alone.Content || r.Reasoning != alone.Reasoning || r.CompletionTokens != alone.Usage.CompletionTokens {
			t.Errorf("sample %d differs from the answer of a request with seed %d alone", k, seed)
		}
	}
	// Each prompt read once, the other three samples of it found in the
	// prefix cache; the test request for n and the four checks above
	// read theirs too.
	queries := scrapeMetric(t, url, "vllm:prefix_cache_queries_total")
	hits := scrapeMetric(t, url, "vllm:prefix_cache_hits_total")
	if prefilled := queries - hits; prefilled > queries/4+200 {
		t.Errorf("prompt tokens prefilled %v of %v looked up: more than once per prompt", prefilled, queries)
	}
	if s := w.Stats(); s.Completed != n*4 {
		t.Errorf("completed %d, want %d", s.Completed, n*4)
	}
}

// A backend that ignores n is asked for each sample on its own, by the
// same worker, and every sample still gets one result.
func TestSamplesFallBackToOneRequestEach(t *testing.T) {
	const n = 3
	b, _ := samplesRun(t, n, provision.Options{})
	llm, url := newFakeLLM(t, &fakeLLM{})
	w, _ := b.start(t, worker.Config{Window: 4}, url)
	b.waitSettled(t, 30*time.Second)
	waitCounted(t, n*4, w)
	if res := b.unitResults(t); len(res) != n*4 {
		t.Fatalf("%d results, want %d", len(res), n*4)
	}
	for i := range n {
		prompt := strings.Repeat(fmt.Sprintf("question %d ", i), 30)
		if got := llm.count(prompt); got != 4 {
			t.Errorf("prompt %d asked %d times, want once per sample", i, got)
		}
	}
}

// A redelivered message asks only for the samples without a stored
// outcome: an answer stored by the delivery that died is kept, and no
// sample is written twice.
func TestSamplesRedeliveryAsksOnlyForTheRest(t *testing.T) {
	b, _ := samplesRun(t, 1, provision.Options{AckWait: 300 * time.Millisecond})
	msg, meta := b.takeFirstDelivery(t)
	if meta.NumDelivered != 1 {
		t.Fatalf("delivery %d", meta.NumDelivered)
	}
	p, err := schema.DecodePrompt(msg.Data())
	if err != nil {
		t.Fatal(err)
	}
	// What the first delivery stored before its worker died: samples 1
	// and 2.
	for _, k := range []int{1, 2} {
		storeEarlierAnswer(t, b, p, k)
	}
	llm, url := newFakeLLM(t, &fakeLLM{})
	w, _ := b.start(t, worker.Config{Window: 2}, url)
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, 2, w)
	res := b.unitResults(t)
	if len(res) != 4 {
		t.Fatalf("%d results, want 4", len(res))
	}
	for _, k := range []int{1, 2} {
		if r := res[schema.Unit{ID: p.ID, Sample: k}.Key()]; r.Content != "from before" {
			t.Errorf("sample %d was answered again", k)
		}
	}
	if got := llm.count(p.Messages[0].Content); got != 2 {
		t.Errorf("%d requests for the prompt, want 2: samples 0 and 3", got)
	}
}

// An answer of a request of several that is cut at max_tokens is asked
// again alone, with twice the budget, under --on-length retry; the
// others are kept as they came, and a sample cut at the cap is
// dead-lettered alone.
func TestSamplesLengthRetryAlone(t *testing.T) {
	const n = 4
	m := schema.Manifest{Run: "samples", Samples: 4, SamplesPerMessage: 4, Total: n * 4,
		Params: schema.Params{Seed: ptr(int64(3)), Temperature: ptr(0.8), MaxTokens: 20},
		Policy: schema.Policy{OnLength: schema.OnLengthRetry, LengthRetryMaxTokens: 30}}
	var prompts []schema.Prompt
	for i := range n {
		prompts = append(prompts, schema.Prompt{ID: fmt.Sprintf("p%d", i), Samples: 4,
			Messages: []schema.Message{{Role: "user", Content: fmt.Sprintf("question %d", i)}}})
	}
	b := setupUnits(t, m, prompts, provision.Options{})
	// Answers of about 25 tokens: many cut at 20, most done at 30, some
	// cut at the cap.
	url := simtest.Serve(t, simulator.Config{Model: "test-model", Speed: 200, OutputMedian: 25, OutputSigma: 0.5, ReasoningShare: -1})
	client, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingBackend{Backend: client}
	w, _ := b.startBackend(t, worker.Config{Window: 8}, counted)
	b.waitSettled(t, 30*time.Second)
	waitCounted(t, n*4, w)
	res := b.unitResults(t)
	retried, dead := 0, int(w.Stats().DeadLettered)
	for key, r := range res {
		if r.FinishReason == "length" {
			t.Errorf("%s: a truncated answer was kept", key)
		}
		if r.Params.MaxTokens == 30 {
			retried++
		}
	}
	if retried == 0 || len(res)+dead != n*4 {
		t.Errorf("%d results (%d asked again with 30 tokens), %d dead-lettered: want some asked again, and every sample settled once", len(res), retried, dead)
	}
	t.Logf("%d samples: %d kept from the first request, %d asked again with 30 tokens, %d dead-lettered at the cap", n*4, len(res)-retried, retried, dead)
	// One request a prompt, the test of n, and one for each retry.
	if got := counted.requests.Load(); got != int64(n+1+retried+dead) {
		t.Errorf("%d requests, want %d: one a prompt, the test of n, one for each sample asked again", got, n+1+retried+dead)
	}
}

// A message whose every sample was stored by a delivery that died before
// its ack is acknowledged without a request.
func TestSamplesRedeliveryAllStored(t *testing.T) {
	b, _ := samplesRun(t, 1, provision.Options{AckWait: 300 * time.Millisecond})
	msg, _ := b.takeFirstDelivery(t)
	p, err := schema.DecodePrompt(msg.Data())
	if err != nil {
		t.Fatal(err)
	}
	for k := range p.SampleCount() {
		storeEarlierAnswer(t, b, p, k)
	}
	llm, url := newFakeLLM(t, &fakeLLM{})
	w, _ := b.start(t, worker.Config{Window: 2}, url)
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, 4, w)
	if got := llm.count(p.Messages[0].Content); got != 0 {
		t.Errorf("%d requests for a prompt whose samples were all stored", got)
	}
	if s := w.Stats(); s.AlreadySettled != 4 || s.Completed != 0 {
		t.Errorf("already settled %d, completed %d; want 4 and 0", s.AlreadySettled, s.Completed)
	}
}

// A redelivered message of samples whose earlier outcomes cannot be
// looked up (the results stream is gone for a while) is handed back to
// look again, not generated; once the stream is back, only the samples
// without a stored answer are asked for.
func TestSamplesFailedLookupHandsBack(t *testing.T) {
	b, _ := samplesRun(t, 1, provision.Options{AckWait: 300 * time.Millisecond})
	msg, _ := b.takeFirstDelivery(t)
	p, err := schema.DecodePrompt(msg.Data())
	if err != nil {
		t.Fatal(err)
	}
	handedBack := &countingHandler{match: "cannot store or read what a delivery keeps in JetStream; prompt handed back to continue later"}
	llm, url := newFakeLLM(t, &fakeLLM{})
	hb := b.heartbeats(t)
	b.start(t, worker.Config{Window: 2, RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: slog.New(handedBack)}, url)
	brokertest.Eventually(t, 10*time.Second, func() bool { return hb.workers() == 1 }, "the worker to have started")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.js.DeleteStream(ctx, schema.ResultsStream); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 20*time.Second, func() bool { return handedBack.n.Load() >= 2 }, "the redelivered message to be handed back twice")
	if n := llm.count(p.Messages[0].Content); n != 0 {
		t.Fatalf("asked %d times while its samples' outcomes could not be looked up", n)
	}
	if err := provision.Streams(ctx, b.js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	storeEarlierAnswer(t, b, p, 2)
	b.waitSettled(t, 30*time.Second)
	if res := b.unitResults(t); len(res) != 4 || res[schema.Unit{ID: p.ID, Sample: 2}.Key()].Content != "from before" {
		t.Errorf("%d results, sample 2 %+v: want 4 and the stored answer kept", len(res), res[schema.Unit{ID: p.ID, Sample: 2}.Key()])
	}
	if n := llm.count(p.Messages[0].Content); n != 3 {
		t.Errorf("asked %d times, want once for each sample without a stored answer (3)", n)
	}
}

// storeEarlierAnswer stores, as a delivery of p that died before its ack
// would have, an answer "from before" for sample k.
func storeEarlierAnswer(t *testing.T, b *bundle, p *schema.Prompt, k int) {
	t.Helper()
	data, err := schema.EncodeResult(&schema.Result{Run: b.run, ID: p.ID, Sample: k, Messages: p.Messages, Content: "from before", FinishReason: "stop", Worker: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(context.Background(), schema.ResultSubject(b.run, schema.Unit{ID: p.ID, Sample: k}), data); err != nil {
		t.Fatal(err)
	}
}

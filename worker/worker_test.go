package worker_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

type bundle struct {
	srv *broker.Server
	js  jetstream.JetStream
	run string
}

func setup(t *testing.T, prompts int, opts provision.Options) *bundle {
	t.Helper()
	return setupRun(t, schema.Manifest{Run: "test"}, prompts, opts)
}

func setupRun(t *testing.T, m schema.Manifest, prompts int, opts provision.Options) *bundle {
	t.Helper()
	return setupPrompts(t, m, brokertest.Prompts(prompts), opts)
}

// setupPrompts is setupRun with the prompts given, queued in their order.
func setupPrompts(t *testing.T, m schema.Manifest, prompts []schema.Prompt, opts provision.Options) *bundle {
	t.Helper()
	srv, _, js := brokertest.Provisioned(t)
	b := &bundle{srv: srv, js: js, run: m.Run}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := provision.WorkersConsumer(ctx, js, b.run, opts); err != nil {
		t.Fatal(err)
	}
	brokertest.Queue(t, js, m, prompts)
	return b
}

// start runs a worker against backendURL until the test ends or stop is
// called; stop waits for Run to return.
func (b *bundle) start(t *testing.T, cfg worker.Config, backendURL string) (w *worker.Worker, stop func()) {
	t.Helper()
	return b.startClient(t, cfg, openai.Config{BaseURL: backendURL})
}

// startClient is start with a client configured by oc.
func (b *bundle) startClient(t *testing.T, cfg worker.Config, oc openai.Config) (w *worker.Worker, stop func()) {
	t.Helper()
	client, err := openai.New(oc)
	if err != nil {
		t.Fatal(err)
	}
	return b.startBackend(t, cfg, client)
}

// startBackend is start with backend given.
func (b *bundle) startBackend(t *testing.T, cfg worker.Config, backend worker.Backend) (w *worker.Worker, stop func()) {
	t.Helper()
	if len(cfg.Runs) == 0 && !cfg.AllRuns {
		cfg.Run = b.run
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.PullWait == 0 {
		cfg.PullWait = 200 * time.Millisecond
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 50 * time.Millisecond
	}
	w, err := worker.New(cfg, b.js, backend)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("worker did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

func (b *bundle) consumer(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := b.js.Consumer(ctx, schema.PromptsStream, schema.WorkersConsumer(b.run))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// waitSettled waits until every prompt has been acknowledged or
// terminated.
func (b *bundle) waitSettled(t *testing.T, timeout time.Duration) {
	t.Helper()
	brokertest.Eventually(t, timeout, func() bool {
		// The server counts a newly stored message into the consumer's
		// NumPending asynchronously, so both counters read zero for a
		// moment after a publish; the ack floor reaching the stream's
		// last message is what proves every prompt was seen and settled.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := b.js.Stream(ctx, schema.PromptsStream)
		if err != nil {
			t.Fatal(err)
		}
		si, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := b.consumer(t)
		return i.NumAckPending == 0 && i.NumPending == 0 && i.AckFloor.Stream >= si.State.LastSeq
	}, "every prompt settled")
}

// stored returns the payloads of every message in stream, in order.
// waitCounted waits until the workers' summed Completed, DeadLettered
// AlreadySettled and HedgedAway reach n. A worker counts a prompt once the server
// has confirmed its ack or termination, a moment after the ack floor
// that waitSettled watches has moved (and now that slots are freed
// before results are stored, several prompts of a run's end may be in
// that moment at once): a test that reads the counters after
// waitSettled waits for them too.
func waitCounted(t *testing.T, n int64, ws ...*worker.Worker) {
	t.Helper()
	brokertest.Eventually(t, 30*time.Second, func() bool {
		var got int64
		for _, w := range ws {
			s := w.Stats()
			got += s.Completed + s.DeadLettered + s.AlreadySettled + s.HedgedAway
		}
		return got >= n
	}, "the workers to count %d prompts settled", n)
}

func (b *bundle) stored(t *testing.T, stream string) [][]byte {
	t.Helper()
	return storedMessages(t, b.js, stream)
}

// results returns the stored results of the run by prompt id, failing on
// a second result for any prompt.
func (b *bundle) results(t *testing.T) map[string]*schema.Result {
	t.Helper()
	out := map[string]*schema.Result{}
	for _, data := range b.stored(t, schema.ResultsStream) {
		r, err := schema.DecodeResult(data)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[r.ID]; dup {
			t.Fatalf("two results for %s", r.ID)
		}
		out[r.ID] = r
	}
	return out
}

func (b *bundle) resultCount(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, schema.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}

// The window is exact: two workers with a window of 20 never have more
// than 20 requests at their backends each. Each may hold up to twice
// its window (a prompt generating and one being stored per slot), so
// the consumer never has more than 80 pending, counting prompts
// delivered but not yet handed to the backend.
func TestWindowIsExact(t *testing.T) {
	const n, window = 300, 20
	b := setup(t, n, provision.Options{})
	hold := make(chan struct{})
	f1, url1 := newFakeLLM(t, &fakeLLM{hold: hold})
	f2, url2 := newFakeLLM(t, &fakeLLM{hold: hold})

	var maxPending atomic.Int64
	sampling, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			p := int64(b.consumer(t).NumAckPending)
			if p > maxPending.Load() {
				maxPending.Store(p)
			}
		}
	}()

	w1, _ := b.start(t, worker.Config{Window: window, PullWait: 200 * time.Millisecond}, url1)
	w2, _ := b.start(t, worker.Config{Window: window, PullWait: 200 * time.Millisecond}, url2)
	brokertest.Eventually(t, 20*time.Second, func() bool {
		a, _ := f1.snapshot()
		c, _ := f2.snapshot()
		return a == window && c == window
	}, "both backends to hold %d requests", window)
	if p := b.consumer(t).NumAckPending; p != 2*window {
		t.Errorf("consumer ack pending = %d with both windows full, want %d", p, 2*window)
	}
	close(hold)
	brokertest.Eventually(t, 60*time.Second, func() bool { return b.resultCount(t) == n }, "all %d results", n)
	stopSampling()
	<-sampled

	if got := maxPending.Load(); got > 2*2*window {
		t.Errorf("consumer ack pending reached %d, more than 2 workers x 2 x window = %d", got, 4*window)
	}
	for i, w := range []*worker.Worker{w1, w2} {
		if s := w.Stats(); s.MaxInFlight > 2*window || s.MaxGenerating > window {
			t.Errorf("worker %d held %d prompts and generated %d at once, window is %d", i+1, s.MaxInFlight, s.MaxGenerating, window)
		}
	}
	for i, f := range []*fakeLLM{f1, f2} {
		if _, m := f.snapshot(); m != window {
			t.Errorf("backend %d saw %d concurrent requests, want exactly %d", i+1, m, window)
		}
	}
	t.Logf("max consumer ack pending %d, worker max in flight %d and %d", maxPending.Load(), w1.Stats().MaxInFlight, w2.Stats().MaxInFlight)
}

// A prompt gives its slot back once its request is over, before its
// result is stored and acknowledged: with a broker 40 ms away, each
// store and ack is a round trip during which the slot already
// generates the next prompt. The window stays exact: one request at
// the backend at a time, and two prompts held at most.
func TestSlotIsFreeWhileResultIsStored(t *testing.T) {
	const n = 12
	b := setup(t, n, provision.Options{})
	_, far := brokertest.ConnectWithLatency(t, b.srv, 20*time.Millisecond)
	remote := *b
	remote.js = far
	f, url := newFakeLLM(t, &fakeLLM{})
	w, _ := remote.start(t, worker.Config{Window: 1}, url)
	brokertest.Eventually(t, 60*time.Second, func() bool { return w.Stats().Completed == n }, "all %d prompts completed", n)
	if got := b.resultCount(t); got != n {
		t.Errorf("%d results stored, want %d", got, n)
	}
	s := w.Stats()
	if _, most := f.snapshot(); most != 1 || s.MaxGenerating != 1 {
		t.Errorf("%d requests at the backend at once (worker counted %d), window is 1", most, s.MaxGenerating)
	}
	if s.MaxInFlight != 2 {
		t.Errorf("held at most %d prompts at once, want 2: the next prompt waited for the last one's store and ack", s.MaxInFlight)
	}
}

// A worker that dies with prompts in flight (its connection gone, nothing
// acknowledged) loses none of them: they come back after AckWait and
// another worker completes them, each exactly once.
func TestWorkerDiesMidFlight(t *testing.T) {
	const n = 60
	b := setup(t, n, provision.Options{AckWait: time.Second})

	// The doomed worker has its own connection so it can die alone.
	doomedNC, doomedJS := brokertest.Connect(t, b.srv)
	hang, hangURL := newFakeLLM(t, &fakeLLM{hold: make(chan struct{})})
	client, err := openai.New(openai.Config{BaseURL: hangURL})
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := worker.New(worker.Config{Run: b.run, Window: 10, Grace: 50 * time.Millisecond, Logger: quiet}, doomedJS, client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	go doomed.Run(ctx) //nolint:errcheck // it dies without stopping
	brokertest.Eventually(t, 10*time.Second, func() bool { c, _ := hang.snapshot(); return c == 10 }, "doomed worker to hold 10 prompts")
	doomedNC.Close() // dies: no ack, no nak, no goodbye
	kill()           // and its HTTP requests end with it

	good, goodURL := newFakeLLM(t, &fakeLLM{})
	b.start(t, worker.Config{Window: 10}, goodURL)
	brokertest.Eventually(t, 30*time.Second, func() bool { return b.resultCount(t) == n }, "all results")
	b.waitSettled(t, 10*time.Second)
	res := b.results(t)
	if len(res) != n {
		t.Fatalf("%d distinct results, want %d", len(res), n)
	}
	redelivered := 0
	for _, p := range brokertest.Prompts(n) {
		if res[p.ID] == nil {
			t.Errorf("prompt %s lost", p.ID)
		}
		if good.count(p.Messages[0].Content) != 1 {
			t.Errorf("prompt %s generated %d times by the surviving worker", p.ID, good.count(p.Messages[0].Content))
		}
		if res[p.ID] != nil && res[p.ID].Attempts > 1 {
			redelivered++
		}
	}
	if redelivered != 10 {
		t.Errorf("%d results came from a second delivery, want the doomed worker's 10", redelivered)
	}
}

// A generation much longer than AckWait is not delivered to anyone else:
// progress acks keep it with its worker. The workers pull nothing more
// once every prompt is with them, so a pull of the test's own, open for
// four AckWaits while they generate, is what would get a prompt whose
// AckWait ran out.
func TestLongGenerationIsNotRedelivered(t *testing.T) {
	const n = 4
	b := setup(t, n, provision.Options{AckWait: 500 * time.Millisecond})
	slow, url := newFakeLLM(t, &fakeLLM{duration: 3 * time.Second}) // 6 x AckWait
	fast, url2 := newFakeLLM(t, &fakeLLM{duration: 3 * time.Second})
	b.start(t, worker.Config{Window: 2}, url)
	b.start(t, worker.Config{Window: 2}, url2)
	brokertest.Eventually(t, 10*time.Second, func() bool {
		a, _ := slow.snapshot()
		c, _ := fast.snapshot()
		return a+c == n
	}, "every prompt generating")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := b.js.Consumer(ctx, schema.PromptsStream, schema.WorkersConsumer(b.run))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(4*500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		t.Errorf("%s was delivered again while its worker generated it", m.Subject())
		_ = m.Nak()
	}
	brokertest.Eventually(t, 30*time.Second, func() bool { return b.resultCount(t) == n }, "all results")
	for id, r := range b.results(t) {
		if r.Attempts != 1 {
			t.Errorf("%s took %d deliveries, want 1", id, r.Attempts)
		}
		if r.CompletionTokens < 50 {
			t.Errorf("%s: %d completion tokens, the slow answer has ~60", id, r.CompletionTokens)
		}
	}
	if rd := b.consumer(t).NumRedelivered; rd != 0 {
		t.Errorf("consumer redelivered %d prompts", rd)
	}
}

// A prompt whose answer is already stored (an earlier worker published it
// and died before acknowledging) is acknowledged without a second answer.
func TestAlreadyStoredResultIsAcked(t *testing.T) {
	b := setup(t, 3, provision.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first := &schema.Result{Run: b.run, ID: "p0001", Content: "the first answer", Worker: "earlier"}
	data, err := schema.EncodeResult(first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(ctx, schema.ResultSubject(b.run, schema.Unit{ID: "p0001"}), data); err != nil {
		t.Fatal(err)
	}
	_, url := newFakeLLM(t, &fakeLLM{})
	b.start(t, worker.Config{Window: 5}, url)
	b.waitSettled(t, 10*time.Second)
	res := b.results(t)
	if len(res) != 3 || res["p0001"].Content != "the first answer" {
		t.Fatalf("results = %d, p0001 = %q; want 3 and the first answer kept", len(res), res["p0001"].Content)
	}
}

// Failures take the documented paths: a 400 is dead-lettered at once; a
// 503 is retried and then succeeds; a prompt that fails on its last
// allowed delivery is dead-lettered as retries-exhausted.
func TestFailureOutcomes(t *testing.T) {
	b := setup(t, 3, provision.Options{MaxDeliver: 3})
	f, url := newFakeLLM(t, &fakeLLM{status: func(prompt string, n int) int {
		switch {
		case strings.HasSuffix(prompt, "p0000"):
			return 400
		case strings.HasSuffix(prompt, "p0001") && n < 3:
			return 503
		case strings.HasSuffix(prompt, "p0002"):
			return 500
		}
		return 200
	}})
	// The breaker is kept out of it: this is about each prompt's outcome.
	w, _ := b.start(t, worker.Config{Window: 5, RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond, BreakerThreshold: 100}, url)
	b.waitSettled(t, 20*time.Second)

	res := b.results(t)
	if len(res) != 1 || res["p0001"] == nil || res["p0001"].Attempts != 3 {
		t.Fatalf("want exactly p0001 completed on attempt 3, got %v", res)
	}
	dead := deadLetters(t, b)
	if d := dead["p0000"]; d == nil || d.Reason != schema.ReasonPermanent || d.Status != 400 || d.Attempts != 1 || !strings.Contains(d.Body, "status 400") {
		t.Errorf("p0000 dead letter = %+v, want permanent, status 400, 1 attempt, body kept", d)
	}
	if d := dead["p0002"]; d == nil || d.Reason != schema.ReasonExhausted || d.Status != 500 || d.Attempts != 3 || len(d.Messages) != 1 {
		t.Errorf("p0002 dead letter = %+v, want retries-exhausted after 3 attempts with its prompt", d)
	}
	if f.count("question p0000") != 1 {
		t.Errorf("a permanent failure was retried: %d requests", f.count("question p0000"))
	}
	if s := w.Stats(); s.Completed != 1 || s.DeadLettered != 2 || s.Retry != 4 {
		t.Errorf("stats = %+v, want 1 completed, 2 dead-lettered, 4 retries", s)
	}
}

func deadLetters(t *testing.T, b *bundle) map[string]*schema.DeadLetter {
	t.Helper()
	out := map[string]*schema.DeadLetter{}
	for _, data := range b.stored(t, schema.DeadStream) {
		d, err := schema.DecodeDeadLetter(data)
		if err != nil {
			t.Fatal(err)
		}
		out[d.ID] = d
	}
	return out
}

// Stopping hands in-flight prompts back once the grace period is over, and
// Run returns nil: another worker gets them at once, not after AckWait.
func TestShutdownHandsBackInFlight(t *testing.T) {
	const n = 10
	b := setup(t, n, provision.Options{AckWait: time.Hour})
	f, url := newFakeLLM(t, &fakeLLM{hold: make(chan struct{})})
	_, stop := b.start(t, worker.Config{Window: 5, Grace: 200 * time.Millisecond}, url)
	brokertest.Eventually(t, 10*time.Second, func() bool { c, _ := f.snapshot(); return c == 5 }, "5 requests in flight")
	stop()
	brokertest.Eventually(t, 5*time.Second, func() bool { c, _ := f.snapshot(); return c == 0 }, "backend requests to end after stop")
	_, url2 := newFakeLLM(t, &fakeLLM{})
	b.start(t, worker.Config{Window: 5}, url2)
	brokertest.Eventually(t, 20*time.Second, func() bool { return b.resultCount(t) == n }, "all %d results (AckWait is an hour)", n)
}

// A worker pointed at a server of another model refuses to start instead
// of dead-lettering every prompt.
func TestWrongModelIsAStartupError(t *testing.T) {
	b := setup(t, 3, provision.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := provision.RunsBucket(ctx, b.js, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := schema.Manifest{Run: b.run, Model: "another-model", Total: 3}
	data, _ := schema.EncodeManifest(&m)
	if _, err := kv.Put(ctx, b.run, data); err != nil {
		t.Fatal(err)
	}
	f, url := newFakeLLM(t, &fakeLLM{})
	client, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Run: b.run, Logger: quiet}, b.js, client)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), `not the run's model "another-model"`) {
		t.Fatalf("Run = %v, want a wrong-model error", err)
	}
	if f.count("question p0000") != 0 || b.consumer(t).NumAckPending != 0 {
		t.Fatal("the worker pulled prompts before checking its backend")
	}
}

// A backend outage in the middle of a run pauses the worker instead of
// burning the prompts' attempts: nothing is dead-lettered, everything
// completes once the backend is back, and the worker reports the pause.
func TestOutagePausesInsteadOfDeadLettering(t *testing.T) {
	const n = 300
	b := setup(t, n, provision.Options{MaxDeliver: 4})
	f, url := newFakeLLM(t, &fakeLLM{duration: 100 * time.Millisecond})
	w, _ := b.start(t, worker.Config{Window: 20, OutageRetry: 50 * time.Millisecond}, url)
	brokertest.Eventually(t, 30*time.Second, func() bool { return b.resultCount(t) >= n/3 }, "a third done")

	f.down.Store(true)
	brokertest.Eventually(t, 10*time.Second, func() bool { return w.Stats().HandedBack > 0 }, "the worker to pause and hand back")
	// Hold the outage well past what MaxDeliver 4 with retries would
	// survive without the breaker.
	deadline := time.Now().Add(2 * time.Second)
	brokertest.Eventually(t, 5*time.Second, func() bool { return time.Now().After(deadline) }, "the outage to last")
	f.down.Store(false)

	b.waitSettled(t, 60*time.Second)
	if got := b.resultCount(t); got != n {
		t.Errorf("%d results, want %d", got, n)
	}
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d dead letters after an outage, want 0", len(dead))
	}
	s := w.Stats()
	if s.Paused < time.Second {
		t.Errorf("paused for %v, the outage lasted 2s", s.Paused)
	}
	t.Logf("handed back %d prompts, paused %v, retried %d", s.HandedBack, s.Paused.Round(time.Millisecond), s.Retry)
}

// The run's on-length policy: retry asks again with twice max_tokens;
// dead-letter sends a truncated answer to the dead letters.
func TestOnLengthPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		wantDone bool
	}{{schema.OnLengthRetry, true}, {schema.OnLengthDeadLetter, false}, {schema.OnLengthKeep, true}} {
		t.Run(tc.policy, func(t *testing.T) {
			b := setupRun(t, schema.Manifest{Run: "len", Params: schema.Params{MaxTokens: 10},
				Policy: schema.Policy{OnLength: tc.policy, LengthRetryMaxTokens: 40}}, 2, provision.Options{})
			var budgets []int
			var mu sync.Mutex
			_, url := newFakeLLM(t, &fakeLLM{truncateBelow: 30, onMaxTokens: func(n int) {
				mu.Lock()
				budgets = append(budgets, n)
				mu.Unlock()
			}})
			b.start(t, worker.Config{Window: 2}, url)
			b.waitSettled(t, 20*time.Second)
			res := b.results(t)
			if tc.wantDone != (len(res) == 2) {
				t.Fatalf("%d results", len(res))
			}
			switch tc.policy {
			case schema.OnLengthRetry:
				for _, r := range res {
					if r.FinishReason != "stop" || r.Params.MaxTokens != 40 || r.Truncated {
						t.Errorf("retried result: finish %s, max_tokens %d, truncated %v", r.FinishReason, r.Params.MaxTokens, r.Truncated)
					}
				}
				if len(budgets) != 6 { // 10, 20, 40 for each of 2 prompts
					t.Errorf("budgets asked: %v", budgets)
				}
			case schema.OnLengthKeep:
				for _, r := range res {
					if !r.Truncated || r.FinishReason != "length" {
						t.Errorf("kept result not flagged: %+v", r)
					}
				}
			case schema.OnLengthDeadLetter:
				for id, d := range deadLetters(t, b) {
					if d.Reason != schema.ReasonTruncated {
						t.Errorf("%s: reason %s", id, d.Reason)
					}
				}
			}
		})
	}
}

// Garbage or an unknown schema version on a prompt subject is
// dead-lettered as poison, named by the id in its header, and the prompts
// around it are processed as usual.
func TestPoisonPromptIsDeadLettered(t *testing.T) {
	b := setup(t, 3, provision.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for id, data := range map[string][]byte{"garbage": []byte("\xc1 not msgpack"), "future": {0x81, 0xa1, 'v', 0x63}} {
		m := nats.NewMsg(schema.PromptSubject(b.run, schema.Unit{ID: id}))
		m.Data = data
		m.Header.Set(schema.HeaderPromptID, id)
		if _, err := b.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	_, url := newFakeLLM(t, &fakeLLM{})
	b.start(t, worker.Config{Window: 5}, url)
	b.waitSettled(t, 20*time.Second)
	if got := b.resultCount(t); got != 3 {
		t.Errorf("%d results, want the 3 good prompts", got)
	}
	dead := deadLetters(t, b)
	for _, id := range []string{"garbage", "future"} {
		d := dead[id]
		if d == nil || d.Reason != schema.ReasonPoison {
			t.Fatalf("%s: dead letter %+v, want poison", id, d)
		}
		t.Logf("%s: %s", id, d.Error)
	}
	if !strings.Contains(dead["future"].Error, "schema version 99") {
		t.Errorf("future: error does not name the version: %s", dead["future"].Error)
	}
}

package simulator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// endless is a config whose answers outlast any test, so requests stay
// in the engine until the test cancels them.
func endless(maxSeqs int) Config {
	return Config{MaxNumSeqs: maxSeqs, Speed: 1, OutputMedian: 100_000, OutputSigma: 0.01}
}

func TestContinuousBatching(t *testing.T) {
	ts := startServer(t, endless(4))
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, 10)
	for i := range cancels {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := ts.post(ctx, t, map[string]any{"messages": userMessages(fmt.Sprint("batch ", i))})
			if err == nil {
				resp.Body.Close()
				t.Errorf("request %d finished with %d; want it canceled", i, resp.StatusCode)
			}
		}()
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	}()
	eventually(t, 10*time.Second, "4 running and 6 waiting", func() bool {
		st := ts.Stats()
		if st.Running > 4 {
			t.Fatalf("running %d > MaxNumSeqs 4", st.Running)
		}
		return st.Running == 4 && st.Waiting == 6
	})
	if r, w := ts.scrape(t, "vllm:num_requests_running"), ts.scrape(t, "vllm:num_requests_waiting"); r != 4 || w != 6 {
		t.Errorf("metrics: running %v waiting %v, want 4 and 6", r, w)
	}
	// The four running sequences show up in the gauge once their
	// prefill has run.
	eventually(t, 10*time.Second, "kv cache in use", func() bool {
		kv := ts.scrape(t, "vllm:kv_cache_usage_perc")
		if kv > 1 {
			t.Fatalf("kv cache usage %v > 1", kv)
		}
		return kv > 0
	})
	// Leaving frees a slot or a queue place at once; a waiter moves up.
	cancels[0]()
	eventually(t, 10*time.Second, "4 running and 5 waiting", func() bool {
		st := ts.Stats()
		return st.Running == 4 && st.Waiting == 5 && st.Aborted == 1
	})
	for _, c := range cancels {
		c()
	}
	eventually(t, 10*time.Second, "engine empty", func() bool {
		st := ts.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.Aborted == 10
	})
}

// TestDisconnectFreesSlot checks that a stream sends nothing while
// queued, and that a client leaving mid-stream hands its slot to the
// next request at once.
func TestDisconnectFreesSlot(t *testing.T) {
	ts := startServer(t, endless(1))
	body := map[string]any{"messages": userMessages("first"), "stream": true}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	respA, err := ts.post(ctxA, t, body)
	if err != nil {
		t.Fatalf("post A: %v", err)
	}
	defer respA.Body.Close()

	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	gotB := make(chan *http.Response, 1)
	go func() {
		resp, err := ts.post(ctxB, t, map[string]any{"messages": userMessages("second"), "stream": true})
		if err != nil {
			close(gotB)
			return
		}
		gotB <- resp
	}()
	eventually(t, 10*time.Second, "B queued", func() bool { return ts.Stats().Waiting == 1 })

	// While A streams, B has no response at all, not even headers.
	buf := make([]byte, 4096)
	for chunks := 0; chunks < 5; {
		n, err := respA.Body.Read(buf)
		if err != nil {
			t.Fatalf("reading A: %v", err)
		}
		if n > 0 {
			chunks++
		}
	}
	select {
	case <-gotB:
		t.Fatal("queued request B got response headers before it had a token")
	default:
	}

	cancelA()
	var respB *http.Response
	select {
	case respB = <-gotB:
	case <-time.After(10 * time.Second):
		t.Fatal("B got no response after A disconnected")
	}
	if respB == nil || respB.StatusCode != http.StatusOK {
		t.Fatalf("B: %v", respB)
	}
	defer respB.Body.Close()
	st := ts.Stats()
	if st.Running != 1 || st.Waiting != 0 || st.Aborted != 1 {
		t.Errorf("after A left: %+v", st)
	}
	cancelB()
	eventually(t, 10*time.Second, "B's slot freed", func() bool {
		st := ts.Stats()
		return st.Running == 0 && st.Aborted == 2
	})
}

func TestDeterminismPerSeed(t *testing.T) {
	cfg := shortAnswers(ReasoningFieldReasoning)
	cfg.Speed = 200
	a, b := startServer(t, cfg), startServer(t, cfg)
	cfg.Seed++
	other := startServer(t, cfg)
	messages := userMessages("same question")
	text := func(ts *testServer) string {
		d := ts.complete(t, map[string]any{"messages": messages})
		raw, _ := json.Marshal(d.Choices[0].Message)
		return string(raw)
	}
	ta, tb, to := text(a), text(b), text(other)
	if ta != tb {
		t.Errorf("same seed, different answers:\n%s\n%s", ta, tb)
	}
	if ta == to {
		t.Errorf("different seeds, same answer")
	}
	// A stream carries the same text as the whole answer.
	var streamed, whole string
	for _, c := range a.stream(t, map[string]any{"messages": messages}) {
		for _, ch := range c.Choices {
			r, _ := ch.Delta["reasoning"].(string)
			s, _ := ch.Delta["content"].(string)
			streamed += r + s
		}
	}
	msg := a.complete(t, map[string]any{"messages": messages}).Choices[0].Message
	r, _ := msg["reasoning"].(string)
	c, _ := msg["content"].(string)
	whole = r + c
	if streamed != whole {
		t.Errorf("stream and whole answer differ")
	}
}

// TestRampUp checks the reference run's ramp over HTTP at 100x speed:
// 200 clients start together, completions lag while every slot is busy,
// and the first to finish are the short answers. The requests are queued
// before the engine starts, so how fast the test sends them does not
// matter.
func TestRampUp(t *testing.T) {
	const speed, clients = 100, 200
	s, err := New(Config{Speed: speed})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ts := &testServer{Server: s, url: hs.URL}
	type result struct {
		tokens  int
		elapsed time.Duration
	}
	var (
		mu      sync.Mutex
		results []result
		start   time.Time
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		wg.Wait()
	}()
	predicted := 0
	for i := range clients {
		messages := calibrationPrompt(i)
		predicted += ts.OutputTokens(messages, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := ts.post(ctx, t, map[string]any{"messages": messages})
			if err != nil {
				return // canceled at the end of the test
			}
			defer resp.Body.Close()
			var d decoded
			if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || d.Usage == nil {
				return
			}
			mu.Lock()
			results = append(results, result{d.Usage.CompletionTokens, time.Since(start)})
			mu.Unlock()
		}()
	}
	eventually(t, 30*time.Second, "all requests queued", func() bool { return s.Stats().Waiting == clients })
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	go func() {
		if err := s.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	eventually(t, 30*time.Second, "40 completions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) >= 40
	})
	mu.Lock()
	got := append([]result(nil), results[:40]...)
	mu.Unlock()

	mean := func(rs []result) float64 {
		sum := 0
		for _, r := range rs {
			sum += r.tokens
		}
		return float64(sum) / float64(len(rs))
	}
	sim40 := got[39].elapsed * speed
	first10, first40 := mean(got[:10]), mean(got)
	trueMean := float64(predicted) / clients
	t.Logf("40th completion at about %v simulated; mean tokens first 10 %.0f, first 40 %.0f, all 200 %.0f",
		sim40.Round(time.Second), first10, first40, trueMean)
	if sim40 < 40*time.Second || sim40 > 130*time.Second {
		t.Errorf("40th completion at %v simulated, want about 65s", sim40)
	}
	if first10 < 100 || first10 > 400 || first40 < 250 || first40 > 550 {
		t.Errorf("early means %.0f (first 10) and %.0f (first 40), want a few hundred", first10, first40)
	}
	if trueMean < 3*first40 {
		t.Errorf("true mean %.0f is not far above the early mean %.0f", trueMean, first40)
	}
}

func TestServeGracefulShutdown(t *testing.T) {
	s, err := New(shortAnswers(ReasoningFieldReasoning))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, l) }()
	ts := &testServer{Server: s, url: "http://" + l.Addr().String()}
	got := make(chan int, 1)
	go func() {
		resp, err := ts.post(context.Background(), t, map[string]any{"messages": userMessages("in flight")})
		if err != nil {
			got <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	eventually(t, 10*time.Second, "request running", func() bool { return s.Stats().Running == 1 })
	cancel()
	if code := <-got; code != http.StatusOK {
		t.Errorf("request in flight at shutdown got %d, want it finished", code)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/simulator"
)

// instantLLM answers every request at once with a short streamed answer:
// what is left is aerie's own cost per prompt (NATS, encoding, fsync).
func instantLLM() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","reasoning":"short thought"}}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"short answer"},"finish_reason":"stop"}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14}}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
}

// BenchmarkEndToEndZeroLatency: prompts/s through the whole pipeline
// (produce, 2 workers x 200, aggregate with fsync) when the backend
// costs nothing, against a plain HTTP client holding one worker's window
// of streams (200) open on the same server. Each iteration measures, side by
// side: the plain client, aerie with the broker fsyncing every write
// (aerie's setting), and aerie with the broker flushing every two
// minutes (JetStream's default), to price durability. The metrics are
// medians over iterations: aerie/plain is how much of what a bare
// client gets out of a free backend aerie delivers end to end.
func BenchmarkEndToEndZeroLatency(b *testing.B) {
	const n, workers, window = 10000, 2, 200
	prompts := promptsFile(b, n)
	bodies := requestBodies(b, prompts)
	llm := instantLLM()
	defer llm.Close()
	var plain, synced, lazy, ratio, syncPrice []float64
	for i := 0; b.Loop(); i++ {
		rate := func(sync time.Duration) float64 {
			cfg := pipeline.Config{
				Run: fmt.Sprintf("zero%d", i), PromptsFile: prompts, DataDir: b.TempDir(),
				Backend: llm.URL, Model: "m", Workers: workers, Window: window, NATSSyncInterval: sync,
				EventInterval: 100 * time.Millisecond, Logger: quiet,
			}
			start := time.Now()
			sum, err := pipeline.Run(context.Background(), cfg)
			if err != nil || !sum.Done {
				b.Fatalf("run: %v %+v", err, sum)
			}
			return n / time.Since(start).Seconds()
		}
		// Labels let a CPU profile of the benchmark be split by side
		// (go tool pprof -tagfocus side=aerie-sync).
		var p, s, l float64
		side := func(name string, f func()) {
			pprof.Do(context.Background(), pprof.Labels("side", name), func(context.Context) { f() })
		}
		side("plain", func() { p = plainClientRate(b, llm.URL, bodies, window) })
		side("aerie-sync", func() { s = rate(0) })
		side("aerie-2m", func() { l = rate(2 * time.Minute) })
		plain, synced, lazy = append(plain, p), append(synced, s), append(lazy, l)
		ratio, syncPrice = append(ratio, s/p), append(syncPrice, s/l)
	}
	b.ReportMetric(median(synced), "prompts/s")
	b.ReportMetric(median(plain), "plain-prompts/s")
	b.ReportMetric(median(ratio), "aerie/plain")
	b.ReportMetric(median(lazy), "prompts/s-2m-sync")
	b.ReportMetric(median(syncPrice), "sync-always/2m")
}

// requestBodies is each prompt of the file as the JSON body of a
// streaming chat request, encoded once up front so that the plain
// client's loop costs only HTTP.
func requestBodies(b *testing.B, prompts string) [][]byte {
	var out [][]byte
	for _, r := range readRequests(b, prompts) {
		body, err := json.Marshal(struct {
			Model    string           `json:"model"`
			Messages []openai.Message `json:"messages"`
			Stream   bool             `json:"stream"`
		}{"m", r.Messages, true})
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, body)
	}
	return out
}

// plainClientRate posts every body to url's chat endpoint from `inFlight`
// goroutines sharing one net/http client, reading each SSE stream to its
// end, and returns requests completed per wall-clock second: the baseline
// with no NATS, no encoding and no disk.
func plainClientRate(b *testing.B, url string, bodies [][]byte, inFlight int) float64 {
	tr := &http.Transport{MaxIdleConns: inFlight, MaxIdleConnsPerHost: inFlight}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	next := make(chan []byte)
	go func() {
		defer close(next)
		for _, body := range bodies {
			next <- body
		}
	}()
	var wg sync.WaitGroup
	start := time.Now()
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for body := range next {
				resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Errorf("plain client: status %d, %v", resp.StatusCode, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(len(bodies)) / time.Since(start).Seconds()
}

// BenchmarkSimulatorFraction compares, side by side in one run, the
// simulator's steady-state completions per second when a plain client
// keeps `window` requests in flight against it, with the same figure for
// aerie (one worker with that window). The ratio is how much of the
// backend's capacity aerie delivers.
func BenchmarkSimulatorFraction(b *testing.B) {
	const n, window, speed = 6000, 200, 200.0
	prompts := promptsFile(b, n)
	simCfg := simulator.Config{Speed: speed}
	var direct, viaAerie, ratio []float64
	for i := 0; b.Loop(); i++ {
		d := directRate(b, prompts, simCfg, window)
		cfg := pipeline.Config{
			Run: fmt.Sprintf("frac%d", i), PromptsFile: prompts, DataDir: b.TempDir(),
			Sim: simCfg, Workers: 1, Window: window, EventInterval: time.Second, Logger: quiet,
		}
		sum, err := pipeline.Run(context.Background(), cfg)
		if err != nil || !sum.Done {
			b.Fatalf("run: %v %+v", err, sum)
		}
		a := steadyRate(finishTimes(b, sum.Completions))
		direct, viaAerie, ratio = append(direct, d/speed), append(viaAerie, a/speed), append(ratio, a/d)
	}
	b.ReportMetric(median(direct), "sim-req/s")
	b.ReportMetric(median(viaAerie), "aerie-req/s")
	b.ReportMetric(median(ratio), "fraction")
}

// directRate drives the simulator with `window` concurrent streaming
// requests, no NATS, and returns the steady-state completions per
// wall-clock second.
func directRate(b *testing.B, prompts string, cfg simulator.Config, window int) float64 {
	sim, err := simulator.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sim.Serve(ctx, l) //nolint:errcheck
	client, err := openai.New(openai.Config{BaseURL: "http://" + l.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	reqs := readRequests(b, prompts)
	next := make(chan openai.ChatRequest)
	go func() {
		defer close(next)
		for _, r := range reqs {
			next <- r
		}
	}()
	var mu sync.Mutex
	var times []time.Time
	var wg sync.WaitGroup
	for range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range next {
				if _, err := client.ChatStream(ctx, r, func(int) {}); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				times = append(times, time.Now())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return steadyRate(times)
}

func readRequests(b *testing.B, path string) []openai.ChatRequest {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []openai.ChatRequest
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// The same messages aerie sends, so the simulator gives the same
		// answer lengths.
		_, msgs, err := dataset.ParseLine(sc.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		req := openai.ChatRequest{Model: simulator.DefaultModel}
		for _, m := range msgs {
			req.Messages = append(req.Messages, openai.Message{Role: m.Role, Content: m.Content})
		}
		out = append(out, req)
	}
	return out
}

func finishTimes(b *testing.B, path string) []time.Time {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l struct {
			FinishedAt time.Time `json:"finished_at"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			b.Fatal(err)
		}
		out = append(out, l.FinishedAt)
	}
	return out
}

// steadyRate is completions per second between the 25th and 75th
// percentile completion: ramp-up and drain excluded.
func steadyRate(times []time.Time) float64 {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	lo, hi := len(times)/4, 3*len(times)/4
	if hi <= lo {
		return 0
	}
	return float64(hi-lo) / times[hi].Sub(times[lo]).Seconds()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

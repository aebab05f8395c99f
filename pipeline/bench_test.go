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
	"github.com/aerie-dev/aerie/worker"
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
				Backend: llm.URL, Model: "m", Workers: workers, Worker: worker.Config{Window: window}, NATSSyncInterval: sync,
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
//
// The simulator runs 50 times faster than real time, which magnifies
// aerie's own time per prompt 50-fold: the milliseconds a window slot
// spends outside the backend (pulling the next prompt, storing the
// result and waiting for the broker's fsync of it, acknowledging) weigh
// against requests 50 times shorter than real ones. At 200 times, which
// an earlier version used, the simulator asked for about 350 results a
// second of wall time, about what the broker's fsync of every stored
// result allows on a 2-core machine: slots then queued behind the fsyncs
// and the figure measured that ceiling, not how well aerie keeps a
// server busy. The two sides run alternately, in turn first, so that a
// change of load on the machine does not favour one side. Besides the
// ratio it reports each side's turnaround, the time a slot spends
// outside the backend per prompt (Little's law: window over throughput,
// less the mean request latency), and from them an estimate of the
// ratio at real speed, where requests last 50 times longer and the
// turnaround stays as measured here (a bound: with 50 times fewer
// results a second they would not queue).
func BenchmarkSimulatorFraction(b *testing.B) {
	const n, window, speed = 3000, 200, 50.0
	prompts := promptsFile(b, n)
	simCfg := simulator.Config{Speed: speed}
	var direct, viaAerie, ratio, plainTurn, aerieTurn, realSpeed []float64
	for i := 0; b.Loop(); i++ {
		var d, a steady
		plainSide := func() { d = steadyOf(directRun(b, prompts, simCfg, window), window) }
		aerieSide := func() {
			cfg := pipeline.Config{
				Run: fmt.Sprintf("frac%d", i), PromptsFile: prompts, DataDir: b.TempDir(),
				Sim: simCfg, Workers: 1, Worker: worker.Config{Window: window}, EventInterval: time.Second, Logger: quiet,
			}
			sum, err := pipeline.Run(context.Background(), cfg)
			if err != nil || !sum.Done {
				b.Fatalf("run: %v %+v", err, sum)
			}
			a = steadyOf(finished(b, sum.Completions), window)
		}
		if i%2 == 0 {
			plainSide()
			aerieSide()
		} else {
			aerieSide()
			plainSide()
		}
		direct, viaAerie, ratio = append(direct, d.rate/speed), append(viaAerie, a.rate/speed), append(ratio, a.rate/d.rate)
		plainTurn, aerieTurn = append(plainTurn, d.turnaround.Seconds()*1000), append(aerieTurn, a.turnaround.Seconds()*1000)
		// At real speed a request lasts speed times as long (as the plain
		// client's do here, the backend full); the turnarounds stay.
		real := d.latency.Seconds() * speed
		realSpeed = append(realSpeed, (real+d.turnaround.Seconds())/(real+a.turnaround.Seconds()))
	}
	b.ReportMetric(median(direct), "sim-req/s")
	b.ReportMetric(median(viaAerie), "aerie-req/s")
	b.ReportMetric(median(ratio), "fraction")
	b.ReportMetric(median(plainTurn), "plain-turnaround-ms")
	b.ReportMetric(median(aerieTurn), "aerie-turnaround-ms")
	b.ReportMetric(median(realSpeed), "fraction-1x-est")
}

// completion is when a request finished and how long it took.
type completion struct {
	at      time.Time
	latency time.Duration
}

// steady is a side's steady state: completions per wall-clock second
// between the 25th and 75th percentile completion (ramp-up and drain
// excluded), the mean latency of those completions, and the time a
// window slot spent outside the backend per completion.
type steady struct {
	rate       float64
	latency    time.Duration
	turnaround time.Duration
}

func steadyOf(cs []completion, window int) steady {
	slices.SortFunc(cs, func(a, b completion) int { return a.at.Compare(b.at) })
	lo, hi := len(cs)/4, 3*len(cs)/4
	if hi <= lo {
		return steady{}
	}
	var sum time.Duration
	for _, c := range cs[lo:hi] {
		sum += c.latency
	}
	s := steady{
		rate:    float64(hi-lo) / cs[hi].at.Sub(cs[lo].at).Seconds(),
		latency: sum / time.Duration(hi-lo),
	}
	// Little's law: each of the window's slots goes round once per
	// window/rate seconds, of which latency is spent in the backend.
	s.turnaround = time.Duration(float64(window)/s.rate*float64(time.Second)) - s.latency
	return s
}

// directRun drives the simulator with `window` concurrent streaming
// requests, no NATS, and returns when each finished and how long it
// took.
func directRun(b *testing.B, prompts string, cfg simulator.Config, window int) []completion {
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
	var done []completion
	var wg sync.WaitGroup
	for range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range next {
				comp, err := client.ChatStream(ctx, r, func(int) {})
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				done = append(done, completion{at: time.Now(), latency: comp.Latency})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return done
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

// finished reads when each result of a completions file was finished
// and its request's latency. Latencies are whole milliseconds, cut
// down: half a millisecond is added back, their mean loss.
func finished(b *testing.B, path string) []completion {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []completion
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l struct {
			FinishedAt time.Time `json:"finished_at"`
			LatencyMs  int64     `json:"latency_ms"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			b.Fatal(err)
		}
		out = append(out, completion{at: l.FinishedAt, latency: time.Duration(l.LatencyMs)*time.Millisecond + time.Millisecond/2})
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

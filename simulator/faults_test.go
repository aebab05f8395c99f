package simulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// binomialBounds is the interval count must fall in for n draws at
// rate p: the mean plus or minus 5 standard deviations, which a correct
// sampler leaves with probability below 1e-6.
func binomialBounds(n int, p float64) (lo, hi float64) {
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	return mean - 5*sd, mean + 5*sd
}

func checkRate(t *testing.T, what string, count, n int, p float64) {
	t.Helper()
	lo, hi := binomialBounds(n, p)
	if float64(count) < lo || float64(count) > hi {
		t.Errorf("%s: %d of %d, want in [%.0f, %.0f] for rate %v", what, count, n, lo, hi, p)
	}
}

// mixedFaults injects every kind at once.
var mixedFaults = Faults{
	Rate429: 0.04, Rate500: 0.04, Rate503: 0.04, Rate400: 0.04,
	HangRate: 0.01, DisconnectRate: 0.04, StreamErrorRate: 0.04,
	SlowFirstByte: 200 * time.Second, SlowFirstByteRate: 0.03,
}

func TestFaultDecisionRates(t *testing.T) {
	const n = 200_000
	f := mixedFaults
	counts := map[faultKind]int{}
	slow, failedTwice, failedFirst := 0, 0, 0
	answerFaults := f.Rate429 + f.Rate500 + f.Rate503 + f.Rate400 + f.HangRate + f.DisconnectRate + f.StreamErrorRate
	for i := range n {
		h := promptHash(userMessages(fmt.Sprint("prompt ", i)), 9)
		p := f.decide(h, 0)
		counts[p.kind]++
		if p.slow {
			slow++
		}
		if p.cutsAnswer() && (p.cutShare < minCutShare || p.cutShare >= maxCutShare) {
			t.Fatalf("cut share %v outside [%v, %v)", p.cutShare, minCutShare, maxCutShare)
		}
		if p.kind != faultNone {
			failedFirst++
			if f.decide(h, 1).kind != faultNone {
				failedTwice++
			}
		}
		if p != f.decide(h, 0) {
			t.Fatal("the same attempt drew differently")
		}
	}
	for _, r := range f.answerRates() {
		checkRate(t, faultLabels[r.kind], counts[r.kind], n, r.rate)
	}
	checkRate(t, "slow first byte", slow, n, f.SlowFirstByteRate)
	// A retry draws afresh: a prompt that failed once fails again at
	// the base rate, not always.
	checkRate(t, "second failure after a first", failedTwice, failedFirst, answerFaults)
	if got := (Faults{}).decide(12345, 0); got != (faultPlan{}) {
		t.Errorf("zero Faults drew %+v", got)
	}
}

func TestCutAfter(t *testing.T) {
	tests := []struct {
		share  float64
		tokens int
		want   int
	}{
		{0.5, 100, 50},
		{0.1, 5, 1}, // at least one token
		{0.9, 1, 1}, // never more than the answer
		{0.89, 10, 8},
	}
	for _, tt := range tests {
		if got := (faultPlan{cutShare: tt.share}).cutAfter(tt.tokens); got != tt.want {
			t.Errorf("cutAfter(%v of %d) = %d, want %d", tt.share, tt.tokens, got, tt.want)
		}
	}
}

func TestValidateFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults Faults
		want   string
	}{
		{"negative rate", Faults{Rate429: -0.1}, "fault 429 rate must be in [0, 1], got -0.1"},
		{"rate above 1", Faults{HangRate: 1.5}, "fault hang rate must be in [0, 1], got 1.5"},
		{"NaN", Faults{Rate500: math.NaN()}, "fault 500 rate must be in [0, 1], got NaN"},
		{"sum above 1", Faults{Rate503: 0.6, DisconnectRate: 0.5}, "add up to 1.1"},
		{"stream error in the sum", Faults{Rate500: 0.5, StreamErrorRate: 0.6}, "add up to 1.1"},
		{"stream error rate", Faults{StreamErrorRate: 2}, "fault stream_error rate must be in [0, 1], got 2"},
		{"slow rate", Faults{SlowFirstByte: time.Second, SlowFirstByteRate: 2}, "slow first byte rate must be in [0, 1]"},
		{"slow without delay", Faults{SlowFirstByteRate: 0.1}, "needs a slow first byte duration"},
		{"negative delay", Faults{SlowFirstByte: -time.Second}, "slow first byte must be >= 0"},
		{"outage mode", Faults{Outages: []Outage{{Start: 0, Duration: time.Second, Mode: "down"}}}, `mode must be "refuse" or "503"`},
		{"outage duration", Faults{Outages: []Outage{{Start: 0, Mode: Outage503}}}, "duration must be > 0"},
		{"outage overlap", Faults{Outages: []Outage{
			{Start: time.Minute, Duration: time.Minute, Mode: Outage503},
			{Start: 90 * time.Second, Duration: time.Second, Mode: OutageRefuse},
		}}, "overlap; start the later one at 2m0s or after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Faults: tt.faults}.WithDefaults()
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	ok := Config{Faults: Faults{Rate429: 0.5, Rate503: 0.5, SlowFirstByte: time.Second, SlowFirstByteRate: 1,
		Outages: []Outage{{Start: 0, Duration: time.Minute, Mode: OutageRefuse}, {Start: time.Minute, Duration: time.Second, Mode: Outage503}}}}
	if err := ok.WithDefaults().Validate(); err != nil {
		t.Errorf("valid faults refused: %v", err)
	}
}

// outcome is what a client saw of one request.
type outcome struct {
	kind      faultKind     // faultNone for a complete answer
	firstByte time.Duration // until the response headers
	body      string        // error body, for statuses
}

// classifyResponse sends a streaming request for messages and tells what
// came back: a status, a stream cut short (disconnect), nothing before
// hangAfter (hang), or a complete stream.
func classifyResponse(t *testing.T, url string, messages []Message, hangAfter time.Duration) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	ts := &testServer{url: url}
	start := time.Now()
	resp, err := ts.post(ctx, t, map[string]any{"messages": messages, "stream": true})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return outcome{kind: faultHang}
		}
		t.Errorf("post: %v", err)
		return outcome{kind: numFaultKinds}
	}
	defer resp.Body.Close()
	o := outcome{firstByte: time.Since(start)}
	raw, err := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusOK && err == nil && strings.HasSuffix(string(raw), "data: [DONE]\n\n"):
		o.kind = faultNone
		if strings.Contains(string(raw), `data: {"error": `) {
			o.kind = faultStreamError
		}
	case resp.StatusCode == http.StatusOK && errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(string(raw), "[DONE]"):
		o.kind = faultDisconnect
	case resp.StatusCode == http.StatusBadRequest:
		o.kind, o.body = fault400, string(raw)
	case resp.StatusCode == http.StatusTooManyRequests:
		o.kind, o.body = fault429, string(raw)
	case resp.StatusCode == http.StatusInternalServerError:
		o.kind, o.body = fault500, string(raw)
	case resp.StatusCode == http.StatusServiceUnavailable:
		o.kind, o.body = fault503, string(raw)
	default:
		t.Errorf("unexpected answer: status %d, read error %v, %d bytes", resp.StatusCode, err, len(raw))
		o.kind = numFaultKinds
	}
	if (o.kind == fault429 || o.kind == fault503) && resp.Header.Get("Retry-After") != "1" {
		t.Errorf("%s without Retry-After: 1", faultLabels[o.kind])
	}
	return o
}

// TestFaultsOverHTTP sends 3,000 prompts once each and checks that every
// client saw exactly the fault drawn for its prompt, that each kind came
// at its rate, and that Stats and /metrics count what the clients saw.
func TestFaultsOverHTTP(t *testing.T) {
	t.Parallel()
	const n, clients = 3000, 64
	cfg := Config{Speed: 1000, OutputMedian: 8, OutputSigma: 0.3, Seed: 11, Faults: mixedFaults}
	ts := startServer(t, cfg)
	slowWall := wallTime(cfg.Faults.SlowFirstByte, cfg.Speed)

	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range clients {
		wg.Go(func() {
			for i := range next {
				// A hang never sends a byte; 5 s tells it from an answer
				// that is only slow because the machine is busy.
				outcomes[i] = classifyResponse(t, ts.url, userMessages(fmt.Sprint("rate prompt ", i)), 5*time.Second)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()

	seen := map[faultKind]int{}
	slow := 0
	for i, o := range outcomes {
		want := cfg.Faults.decide(promptHash(userMessages(fmt.Sprint("rate prompt ", i)), cfg.Seed), 0)
		seen[o.kind]++
		if o.kind != want.kind {
			t.Errorf("prompt %d: client saw %s, drawn %s", i, faultLabels[o.kind], faultLabels[want.kind])
			continue
		}
		if want.slow {
			slow++
			if o.kind != faultHang && o.firstByte < slowWall {
				t.Errorf("prompt %d: first byte after %v, want at least %v", i, o.firstByte, slowWall)
			}
		}
		if o.kind == fault400 && !strings.Contains(o.body, "This model's maximum context length is 262144 tokens. However, your messages resulted in") {
			t.Errorf("injected 400 body %s", o.body)
		}
	}
	for _, r := range cfg.Faults.answerRates() {
		checkRate(t, faultLabels[r.kind], seen[r.kind], n, r.rate)
	}
	checkRate(t, "slow first byte", slow, n, cfg.Faults.SlowFirstByteRate)

	got := ts.Stats().Faults
	want := FaultCounts{
		Status400: int64(seen[fault400]), Status429: int64(seen[fault429]),
		Status500: int64(seen[fault500]), Status503: int64(seen[fault503]),
		Hang: int64(seen[faultHang]), Disconnect: int64(seen[faultDisconnect]),
		StreamError: int64(seen[faultStreamError]), SlowFirstByte: int64(slow),
	}
	if got != want {
		t.Errorf("Stats().Faults:\n got %+v\nwant %+v (what the clients saw)", got, want)
	}
	for k, v := range map[string]int64{"503": want.Status503, "disconnect": want.Disconnect, "hang": want.Hang,
		"stream_error": want.StreamError, "outage_cut": 0} {
		if m := ts.scrape(t, `aerie_sim_faults_injected_total{kind="`+k+`"}`); m != float64(v) {
			t.Errorf("aerie_sim_faults_injected_total{kind=%q} = %v, want %d", k, m, v)
		}
	}
	byLabel := map[string]int{}
	for k, v := range seen {
		byLabel[faultLabels[k]] = v
	}
	t.Logf("outcomes of %d requests: %v", n, byLabel)
}

// attemptOutcomes sends prompt attempts times (non-streaming) and lists
// what came back each time.
func attemptOutcomes(t *testing.T, ts *testServer, prompt string, attempts int) []string {
	t.Helper()
	var got []string
	for range attempts {
		resp, err := ts.post(context.Background(), t, map[string]any{"messages": userMessages(prompt)})
		if err != nil {
			got = append(got, "cut")
			continue
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			got = append(got, "cut")
			continue
		}
		got = append(got, fmt.Sprint(resp.StatusCode))
	}
	return got
}

func TestFaultDeterminism(t *testing.T) {
	t.Parallel()
	cfg := Config{Speed: 1000, OutputMedian: 8, Seed: 5,
		Faults: Faults{Rate500: 0.2, Rate429: 0.2, DisconnectRate: 0.1, StreamErrorRate: 0.1}}
	a, b := startServer(t, cfg), startServer(t, cfg)
	cfg.Seed = 6
	other := startServer(t, cfg)
	const prompts, attempts = 40, 6
	var (
		mu                sync.Mutex
		differ, retriedOK int
		wg                sync.WaitGroup
	)
	for i := range prompts {
		wg.Go(func() {
			prompt := fmt.Sprint("determinism ", i)
			ga, gb := attemptOutcomes(t, a, prompt, attempts), attemptOutcomes(t, b, prompt, attempts)
			if fmt.Sprint(ga) != fmt.Sprint(gb) {
				t.Errorf("prompt %d, same seed: %v and %v", i, ga, gb)
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(ga) != fmt.Sprint(attemptOutcomes(t, other, prompt, attempts)) {
				differ++
			}
			if ga[0] != "200" && slices.Contains(ga[1:], "200") {
				retriedOK++
			}
		})
	}
	wg.Wait()
	if differ < prompts/2 {
		t.Errorf("another seed changed the faults of only %d of %d prompts", differ, prompts)
	}
	// Each prompt fails 60% of the time: about 24 fail at first, and
	// nearly all of those succeed within 5 retries.
	if retriedOK < 10 {
		t.Errorf("only %d prompts that failed at first succeeded on a retry", retriedOK)
	}
}

// TestHangHoldsNoSlot checks that a hung request takes no engine slot:
// with one slot, another request completes while it hangs.
func TestHangHoldsNoSlot(t *testing.T) {
	t.Parallel()
	cfg := Config{Speed: 1000, MaxNumSeqs: 1, OutputMedian: 8, Seed: 3, Faults: Faults{HangRate: 0.5}}
	ts := startServer(t, cfg)
	var hung, fine string
	for i := 0; hung == "" || fine == ""; i++ {
		p := fmt.Sprint("hang or not ", i)
		switch cfg.Faults.decide(promptHash(userMessages(p), cfg.Seed), 0).kind {
		case faultHang:
			hung = p
		case faultNone:
			fine = p
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		resp, err := ts.post(ctx, t, map[string]any{"messages": userMessages(hung)})
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("hung request answered %d", resp.StatusCode)
		}
		done <- err
	}()
	eventually(t, 5*time.Second, "the request to hang", func() bool { return ts.Stats().Faults.Hang == 1 })
	if st := ts.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Errorf("a hung request is in the engine: %+v", st)
	}
	ts.complete(t, map[string]any{"messages": userMessages(fine)})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("hung request: %v, want it canceled by the client", err)
	}
}

// TestHungRequestsEndAtShutdown checks that a hung request does not hold
// up Serve's shutdown for the grace period: its connection is closed
// when the shutdown begins.
func TestHungRequestsEndAtShutdown(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Speed: 1000, Faults: Faults{HangRate: 1}})
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
	answered := make(chan error, 1)
	go func() {
		resp, err := ts.post(context.Background(), t, map[string]any{"messages": userMessages("hang on")})
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		answered <- err
	}()
	eventually(t, 5*time.Second, "the request to hang", func() bool { return s.Stats().Faults.Hang == 1 })
	begin := time.Now()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if took := time.Since(begin); took >= shutdownGrace {
		t.Errorf("shutdown took %v: it waited for the hung request", took)
	}
	if err := <-answered; err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("hung request: %v, want its connection closed by the server", err)
	}
}

package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

func TestParseOutages(t *testing.T) {
	tests := []struct {
		spec    string
		want    []Outage
		wantErr string
	}{
		{spec: "", want: nil},
		{spec: "  ", want: nil},
		{spec: "30s+60s:refuse", want: []Outage{{30 * time.Second, time.Minute, OutageRefuse}}},
		{spec: "30s+60s:refuse, 300s+10s:503", want: []Outage{
			{30 * time.Second, time.Minute, OutageRefuse}, {5 * time.Minute, 10 * time.Second, Outage503}}},
		{spec: "1h+1m30s:503,0s+1ms:refuse", want: []Outage{
			{time.Hour, 90 * time.Second, Outage503}, {0, time.Millisecond, OutageRefuse}}},
		{spec: "30s+60s", wantErr: `outage 1 of "30s+60s": "30s+60s" has no :MODE; want START+DURATION:MODE`},
		{spec: "30s60s:refuse", wantErr: `"30s60s:refuse" has no +DURATION`},
		{spec: "half+60s:refuse", wantErr: `start: time: invalid duration "half"`},
		{spec: "30s+60:503", wantErr: `duration: time: missing unit in duration "60"`},
		{spec: "30s+60s:down", wantErr: `mode "down" is not refuse or 503`},
		{spec: "30s+0s:503", wantErr: "duration 0s is not positive"},
		{spec: "-5s+10s:503", wantErr: "start -5s is negative"},
		{spec: "30s+60s:refuse,,1h+1s:503", wantErr: `outage 2 of "30s+60s:refuse,,1h+1s:503": empty`},
		{spec: "30s+60s:refuse,1m+10s:503", wantErr: "outages 30s+1m0s:refuse and 1m0s+10s:503 overlap; start the later one at 1m30s or after"},
	}
	for _, tt := range tests {
		got, err := ParseOutages(tt.spec)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseOutages(%q) error = %v, want it to contain %q", tt.spec, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseOutages(%q): %v", tt.spec, err)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("ParseOutages(%q) = %v, want %v", tt.spec, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("ParseOutages(%q)[%d] = %+v, want %+v", tt.spec, i, got[i], tt.want[i])
			}
			// String writes what ParseOutages reads.
			back, err := ParseOutages(got[i].String())
			if err != nil || len(back) != 1 || back[0] != got[i] {
				t.Errorf("round trip of %v: %v %v", got[i], back, err)
			}
		}
	}
}

// probe is a client that opens a new connection for every request, so
// that a refused connection shows as such rather than as a dead pooled
// one.
var probe = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}

// healthOf is the status of GET /health, or 0 with the error.
func healthOf(url string) (int, error) {
	resp, err := probe.Get(url + "/health")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func refused(url string) bool {
	_, err := healthOf(url)
	return errors.Is(err, syscall.ECONNREFUSED)
}

func healthIs(url string, status int) func() bool {
	return func() bool {
		got, _ := healthOf(url)
		return got == status
	}
}

// TestScheduledOutages runs a refuse outage and then a 503 one from the
// schedule: connections are refused, then served on the same address,
// then answered 503, then served again.
func TestScheduledOutages(t *testing.T) {
	t.Parallel()
	cfg := Config{Speed: 100, OutputMedian: 20, Faults: Faults{Outages: []Outage{
		{Start: 20 * time.Second, Duration: 100 * time.Second, Mode: OutageRefuse}, // 0.2 to 1.2 s of wall time
		{Start: 150 * time.Second, Duration: 50 * time.Second, Mode: Outage503},    // 1.5 to 2 s
	}}}
	ts := serveOn(t, cfg)
	eventually(t, 5*time.Second, "connections refused", func() bool { return refused(ts.url) })
	eventually(t, 5*time.Second, "served again after the refuse outage", healthIs(ts.url, http.StatusOK))
	eventually(t, 5*time.Second, "503 outage", healthIs(ts.url, http.StatusServiceUnavailable))
	eventually(t, 5*time.Second, "served again after the 503 outage", healthIs(ts.url, http.StatusOK))
	ts.complete(t, map[string]any{"messages": userMessages("after the outages")})
	if f := ts.Stats().Faults; f.OutageRefuse != 1 || f.Outage503 != 1 || f.OutageRejected == 0 {
		t.Errorf("fault counts %+v, want one outage of each mode and some requests rejected", f)
	}
}

// adminCall sends an admin request and decodes its report; a status
// other than 200 fails the test unless want says otherwise.
func adminCall(t *testing.T, method, url string, want int) (faultReport, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := probe.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, url, resp.StatusCode, want, raw)
	}
	var rep faultReport
	if want == http.StatusOK {
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, url, raw, err)
		}
	}
	return rep, string(raw)
}

// endlessStream starts a streaming request that will not finish within
// the test and returns once its first chunks have arrived. The client
// gives up after 10 s.
func endlessStream(t *testing.T, ts *testServer) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	resp, err := ts.post(ctx, t, map[string]any{"messages": userMessages("endless"), "stream": true})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", resp, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	buf := make([]byte, 512)
	if _, err := io.ReadAtLeast(resp.Body, buf, 1); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	return resp
}

// checkCut reads the rest of a stream and checks that the server cut it
// off: the body ends abruptly, without [DONE], well before the client
// would give up.
func checkCut(t *testing.T, resp *http.Response) {
	t.Helper()
	rest, err := io.ReadAll(resp.Body)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		t.Errorf("stream not cut: still open when the client gave up")
	case err == nil || strings.Contains(string(rest), "[DONE]"):
		t.Errorf("stream ended cleanly (error %v, [DONE] %v), want it cut", err, strings.Contains(string(rest), "[DONE]"))
	}
}

func TestAdmin503Outage(t *testing.T) {
	t.Parallel()
	cfg := endless(1)
	ts := startServer(t, cfg)
	stream := endlessStream(t, ts)
	queued := make(chan *http.Response, 1)
	go func() {
		resp, err := ts.post(context.Background(), t, map[string]any{"messages": userMessages("queued")})
		if err != nil {
			t.Errorf("queued request: %v", err)
		}
		queued <- resp
	}()
	eventually(t, 5*time.Second, "a request queued", func() bool { return ts.Stats().Waiting == 1 })

	rep, _ := adminCall(t, http.MethodPost, ts.url+"/admin/outage?mode=503", http.StatusOK)
	if rep.Outage == nil || rep.Outage.Mode != Outage503 || rep.Outage.Source != outageFromAdmin || rep.Outage.Remaining != "" {
		t.Errorf("outage in the answer: %+v", rep.Outage)
	}
	checkCut(t, stream)
	if resp := <-queued; resp != nil {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), "ServiceUnavailableError") {
			t.Errorf("queued request: %d %s, want 503", resp.StatusCode, raw)
		}
	}

	if status, err := healthOf(ts.url); status != http.StatusServiceUnavailable {
		t.Errorf("health during the outage: %d %v", status, err)
	}
	resp, err := probe.Get(ts.url + "/v1/models")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("models during the outage: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	status, e, _ := errorBody(t, ts, map[string]any{"messages": userMessages("during"), "max_tokens": 3})
	if status != http.StatusServiceUnavailable || e.Type != "ServiceUnavailableError" || e.Code != 503 {
		t.Errorf("chat during the outage: %d %+v", status, e)
	}
	if v := ts.scrape(t, `aerie_sim_faults_injected_total{kind="outage_503"}`); v != 1 {
		t.Errorf("metrics during the outage: outage_503 = %v, want 1", v)
	}
	client, err := openai.New(openai.Config{BaseURL: ts.url})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Health(context.Background()); openai.Classify(err) != openai.Transient {
		t.Errorf("client health check during a 503 outage: %v (%v), want transient", err, openai.Classify(err))
	}
	if rep, _ := adminCall(t, http.MethodGet, ts.url+"/admin/faults", http.StatusOK); rep.Outage == nil {
		t.Errorf("GET /admin/faults shows no outage")
	}

	rep, _ = adminCall(t, http.MethodDelete, ts.url+"/admin/outage", http.StatusOK)
	if rep.Outage != nil {
		t.Errorf("outage after DELETE: %+v", rep.Outage)
	}
	if status, err := healthOf(ts.url); status != http.StatusOK {
		t.Errorf("health after the outage: %d %v", status, err)
	}
	ts.complete(t, map[string]any{"messages": userMessages("after"), "max_tokens": 3})
	f := ts.Stats().Faults
	// Rejected: health, models, chat and the client's health check.
	if f.Outage503 != 1 || f.OutageCut != 2 || f.OutageRejected != 4 {
		t.Errorf("fault counts %+v, want 1 outage, 2 cut, 4 rejected", f)
	}
}

func TestAdminRefuseOutage(t *testing.T) {
	t.Parallel()
	cfg := endless(4)
	cfg.Speed = 100
	ts := startServer(t, cfg)
	client, err := openai.New(openai.Config{BaseURL: ts.url})
	if err != nil {
		t.Fatal(err)
	}
	streaming := make(chan struct{})
	streamErr := make(chan error, 1)
	go func() {
		var once bool
		_, err := client.ChatStream(context.Background(), openai.ChatRequest{
			Messages: []openai.Message{{Role: "user", Content: "cut me"}},
		}, func(int) {
			if !once {
				once = true
				close(streaming)
			}
		})
		streamErr <- err
	}()
	<-streaming

	// 100 s of simulated time is 1 s of wall time at Speed 100.
	rep, _ := adminCall(t, http.MethodPost, ts.url+"/admin/outage?mode=refuse&duration=100s", http.StatusOK)
	if rep.Outage == nil || rep.Outage.Mode != OutageRefuse || rep.Outage.Remaining == "" {
		t.Errorf("outage in the answer: %+v", rep.Outage)
	}
	if err := <-streamErr; openai.Classify(err) != openai.Transient {
		t.Errorf("stream in flight: %v (%v), want a transient error", err, openai.Classify(err))
	}
	eventually(t, 5*time.Second, "connections refused", func() bool { return refused(ts.url) })
	if err := client.Health(context.Background()); openai.Classify(err) != openai.Transient {
		t.Errorf("client health check while refused: %v (%v), want transient", err, openai.Classify(err))
	}
	eventually(t, 10*time.Second, "served again: the outage ends by itself", healthIs(ts.url, http.StatusOK))
	ts.complete(t, map[string]any{"messages": userMessages("after"), "max_tokens": 3})
	if f := ts.Stats().Faults; f.OutageRefuse != 1 || f.OutageCut != 1 {
		t.Errorf("fault counts %+v, want 1 refuse outage and 1 request cut", f)
	}
	if st := ts.Stats(); st.Running != 0 {
		t.Errorf("the cut stream still holds a slot: %+v", st)
	}
}

// TestRefuseOutageWithHandler checks a refuse outage when only Handler
// is used: requests have their connections closed unanswered.
func TestRefuseOutageWithHandler(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Speed: 100, OutputMedian: 20})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-runDone
	}()
	eventually(t, 5*time.Second, "engine running", healthIs(hs.URL, http.StatusOK))
	// Long enough (100 s of wall time) that the probe below always
	// falls inside it; with Handler alone /admin/ stays reachable, so
	// DELETE ends it.
	adminCall(t, http.MethodPost, hs.URL+"/admin/outage?mode=refuse&duration=10000s", http.StatusOK)
	if _, err := healthOf(hs.URL); err == nil || !errors.Is(err, io.EOF) {
		t.Errorf("health during the outage: %v, want the connection closed unanswered", err)
	}
	adminCall(t, http.MethodDelete, hs.URL+"/admin/outage", http.StatusOK)
	eventually(t, 5*time.Second, "served again", healthIs(hs.URL, http.StatusOK))
}

func TestAdminErrors(t *testing.T) {
	t.Parallel()
	cfg := Config{Speed: 100, Faults: Faults{Rate503: 0.02, HangRate: 0.005, SlowFirstByte: 5 * time.Second, SlowFirstByteRate: 0.1,
		Outages: []Outage{{Start: time.Hour, Duration: time.Minute, Mode: OutageRefuse}}}}
	ts := startServer(t, cfg)
	for _, tt := range []struct{ query, want string }{
		{"", `mode must be \"refuse\" or \"503\", got \"\"`},
		{"?mode=down&duration=1s", `got \"down\"`},
		{"?mode=503&duration=soon", `duration must be a positive Go duration of simulated time such as 60s, got \"soon\"`},
		{"?mode=503&duration=-1s", `got \"-1s\"`},
		{"?mode=refuse", "a refuse outage needs a duration"},
	} {
		_, raw := adminCall(t, http.MethodPost, ts.url+"/admin/outage"+tt.query, http.StatusBadRequest)
		if !strings.Contains(raw, tt.want) || !strings.Contains(raw, "BadRequestError") {
			t.Errorf("POST /admin/outage%s: %s, want %q", tt.query, raw, tt.want)
		}
	}
	rep, _ := adminCall(t, http.MethodGet, ts.url+"/admin/faults", http.StatusOK)
	f := rep.Faults
	if f.Rate503 != 0.02 || f.HangRate != 0.005 || f.SlowFirstByte != "5s" || f.SlowFirstByteRate != 0.1 ||
		len(f.Outages) != 1 || f.Outages[0] != "1h0m0s+1m0s:refuse" {
		t.Errorf("settings %+v", f)
	}
	if rep.Outage != nil || rep.Clock == "" || len(rep.Injected) != int(numFaultKinds)-1 {
		t.Errorf("report %+v", rep)
	}
	// Ending an outage when there is none is not an error.
	adminCall(t, http.MethodDelete, ts.url+"/admin/outage", http.StatusOK)
	if status, _ := healthOf(ts.url); status != http.StatusOK {
		t.Errorf("health after the admin errors: %d", status)
	}
}

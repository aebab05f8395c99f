package livepage_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/livepage"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func event(completed int, at time.Time) schema.Throughput {
	return schema.Throughput{
		Run: "r1", Time: at, Phase: schema.PhaseSteady, Total: 100, Completed: completed, Failed: 2,
		RequestsPerSec: 1.5, TokensPerSec: 420, ETASec: 60, ETALowSec: 50, ETAHighSec: 80,
		FailedByReason: map[string]int{"http 400": 2},
	}
}

// /api/state holds what the page was fed: the latest event, its history,
// the workers from their heartbeats (rates from two of them, the
// backend's host and nothing else of its URL) and the answer lengths.
func TestStateJSON(t *testing.T) {
	p := livepage.New("r1")
	t0 := time.Now().Add(-10 * time.Second)
	p.Event(event(3, t0))
	p.Event(event(7, t0.Add(5*time.Second)))
	hb := schema.Heartbeat{Run: "r1", Worker: "w1", Host: "gpu-7", Time: t0, Window: 200, InFlight: 14,
		InFlightTokens: []int{0, 5, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8}, TokensStreamed: 1000, Backend: "http://user:s3cret@vllm.internal:8000/v1?api_key=hunter2"}
	p.Heartbeat(hb)
	hb.Time, hb.TokensStreamed, hb.Paused, hb.PausedReason = t0.Add(2*time.Second), 1600, true, "backend down"
	p.Heartbeat(hb)
	p.Answer(throughput.Single(120, false))
	p.Answer(throughput.Answer{Requests: []throughput.Request{{CompletionTokens: 40}, {CompletionTokens: 4096, Truncated: true}}})

	srv := httptest.NewServer(livepage.Handler(p))
	defer srv.Close()
	resp, body := get(t, srv.URL+"/api/state")
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	for _, secret := range []string{"s3cret", "hunter2", "user:"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("state shows %q from the backend URL: %s", secret, body)
		}
	}
	var s livepage.State
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("decode state: %v\n%s", err, body)
	}
	if s.Run != "r1" || s.Last == nil || s.Last.Completed != 7 || s.Last.Total != 100 || s.Last.FailedByReason["http 400"] != 2 {
		t.Errorf("state %+v; want run r1 at 7 of 100, 2 failed with http 400", s)
	}
	if len(s.History) != 2 || s.History[0].Completed != 3 || s.History[1].ETAHighSec != 80 {
		t.Errorf("history %+v; want both events, with the ETA band", s.History)
	}
	if len(s.Workers) != 1 {
		t.Fatalf("workers %+v; want w1", s.Workers)
	}
	w := s.Workers[0]
	if w.Name != "w1" || w.Host != "gpu-7" || w.Backend != "vllm.internal:8000" || w.Window != 200 ||
		w.InFlight != 12 || w.Held != 14 || w.TokensPerSec != 300 || !w.Paused || w.PausedReason != "backend down" {
		t.Errorf("worker %+v; want w1 on gpu-7, 300 tokens/s, paused", w)
	}
	var n int64
	for _, b := range s.Lengths.Buckets {
		n += b.Count
	}
	if s.Lengths.Count != 3 || n != 3 || s.Lengths.Max != 4096 || s.Lengths.Truncated != 1 {
		t.Errorf("lengths %+v; want 3 answers up to 4096 tokens, one truncated", s.Lengths)
	}
}

// The event stream sends the state at once, and again when it changes,
// on the same connection.
func TestEventStreamSendsUpdates(t *testing.T) {
	p := livepage.New("r1")
	p.Event(event(1, time.Now()))
	srv := httptest.NewServer(livepage.Handler(p))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan livepage.State)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && name == "state":
				var s livepage.State
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &s); err != nil {
					t.Errorf("bad event data %q: %v", line, err)
					return
				}
				select {
				case events <- s:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	next := func() livepage.State {
		t.Helper()
		select {
		case s, ok := <-events:
			if !ok {
				t.Fatal("event stream ended")
			}
			return s
		case <-ctx.Done():
			t.Fatal("no event within the deadline")
		}
		return livepage.State{}
	}
	if s := next(); s.Last == nil || s.Last.Completed != 1 {
		t.Fatalf("first event %+v; want the state at once, completed 1", s.Last)
	}
	p.Event(event(2, time.Now()))
	p.Event(event(5, time.Now()))
	for {
		s := next()
		if s.Last.Completed == 5 {
			break
		}
		if s.Last.Completed != 2 {
			t.Fatalf("event with completed %d; want 2 then 5", s.Last.Completed)
		}
	}
}

// The page loads nothing from anywhere but its own server, says so in
// its content policy, and fits a phone's screen.
func TestPageIsSelfContained(t *testing.T) {
	srv := httptest.NewServer(livepage.Handler(livepage.New("r1")))
	defer srv.Close()
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for _, path := range []string{"/", "/app.js", "/style.css"} {
		resp, body := get(t, srv.URL+path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		for _, m := range url.FindAllString(string(body), -1) {
			if m != "http://www.w3.org" { // the SVG namespace: a name, never fetched
				t.Errorf("%s refers to %s: the page must work without internet", path, m)
			}
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: content security policy %q", path, csp)
		}
		if path == "/" && !strings.Contains(string(body), `name="viewport"`) {
			t.Error("the page has no viewport meta: phones would show it zoomed out")
		}
		if strings.Contains(string(body), "innerHTML") {
			t.Errorf("%s uses innerHTML: values must go in as text", path)
		}
	}
	resp, _ := get(t, srv.URL+"/nothing")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nothing: %s", resp.Status)
	}
	r, err := http.Post(srv.URL+"/api/state", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/state: %s", r.Status)
	}
}

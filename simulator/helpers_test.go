package simulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// testServer is a Server serving on a loopback port for one test.
type testServer struct {
	*Server
	url string
	// key, if set, goes with every chat request as a bearer token.
	key string
}

// startServer builds a server from cfg, serves it until the test ends
// and waits until it is healthy.
func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	ts := serveOn(t, cfg)
	eventually(t, 5*time.Second, "engine running", func() bool {
		resp, err := http.Get(ts.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return ts
}

// serveOn builds a server from cfg and serves it on a loopback port
// until the test ends.
func serveOn(t *testing.T, cfg Config) *testServer {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		// A connection the client dialed but never used counts as
		// active for 5 s in Shutdown; closing the idle ones first
		// keeps cleanup short.
		http.DefaultClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{Server: s, url: "http://" + l.Addr().String()}
}

// userMessages is a one-turn conversation.
func userMessages(text string) []Message {
	return []Message{{Role: "user", Content: text}}
}

// post sends a chat completion request; body is marshalled unless it is
// already a string.
func (ts *testServer) post(ctx context.Context, t *testing.T, body any) (*http.Response, error) {
	t.Helper()
	var raw []byte
	if s, ok := body.(string); ok {
		raw = []byte(s)
	} else {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatalf("marshal request: %v", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/v1/chat/completions", bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if ts.key != "" {
		req.Header.Set("Authorization", "Bearer "+ts.key)
	}
	return http.DefaultClient.Do(req)
}

// decoded is a response or chunk body, read loosely.
type decoded struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Index   int             `json:"index"`
		Delta   map[string]any  `json:"delta"`
		Message map[string]any  `json:"message"`
		Finish  *string         `json:"finish_reason"`
		Logprob json.RawMessage `json:"logprobs"`
		// TokenIDs is nil when the field was absent or null.
		TokenIDs []int `json:"token_ids"`
	} `json:"choices"`
	Usage          *usage `json:"usage"`
	PromptTokenIDs []int  `json:"prompt_token_ids"`
}

// complete sends a non-streaming request and decodes a 200 answer.
func (ts *testServer) complete(t *testing.T, body map[string]any) decoded {
	t.Helper()
	resp, err := ts.post(context.Background(), t, body)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var d decoded
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return d
}

// readEvents reads a whole event stream: the data payloads in order,
// "[DONE]" included.
func readEvents(r io.Reader) ([]string, error) {
	var events []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return events, fmt.Errorf("line without data prefix: %q", line)
		}
		events = append(events, data)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return events, err
	}
	return events, nil
}

// stream sends a streaming request and returns its decoded chunks; the
// stream must end with [DONE].
func (ts *testServer) stream(t *testing.T, body map[string]any) []decoded {
	t.Helper()
	body["stream"] = true
	resp, err := ts.post(context.Background(), t, body)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content type %q", ct)
	}
	events, err := readEvents(resp.Body)
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %d events", len(events))
	}
	chunks := make([]decoded, 0, len(events)-1)
	for _, e := range events[:len(events)-1] {
		var d decoded
		if err := json.Unmarshal([]byte(e), &d); err != nil {
			t.Fatalf("decode chunk %s: %v", e, err)
		}
		chunks = append(chunks, d)
	}
	return chunks
}

// scrape returns the value of the first sample on /metrics whose name,
// and labels if given (a prefix of them, in order), match name.
func (ts *testServer) scrape(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatalf("get metrics: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || !strings.ContainsRune("{ ,", rune(rest[0])) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		return v
	}
	t.Fatalf("metric %s not found in:\n%s", name, raw)
	return 0
}

// countWords reports how many words of text are in words, and how many
// are not; <think> markers are ignored.
func countWords(text string, words []string) (in, out int) {
	set := make(map[string]bool, len(words))
	for _, w := range words {
		set[w] = true
	}
	for _, w := range strings.Fields(text) {
		w = strings.TrimPrefix(strings.TrimSuffix(w, thinkClose), thinkOpen)
		if w == "" {
			continue
		}
		if set[w] {
			in++
		} else {
			out++
		}
	}
	return in, out
}

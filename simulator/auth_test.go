package simulator

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// call sends method to url with an Authorization header (none if
// empty) and returns the status and body.
func call(t *testing.T, method, url, authorization string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp.StatusCode, string(raw)
}

// chatBody is a small valid chat request with a one-token answer, quick
// even at Speed 1.
const chatBody = `{"messages": [{"role": "user", "content": "key?"}], "max_tokens": 1}`

func chatWith(t *testing.T, ts *testServer, authorization string) (int, string) {
	t.Helper()
	return call(t, http.MethodPost, ts.url+"/v1/chat/completions", authorization, strings.NewReader(chatBody))
}

func TestAPIKey(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Speed: 100, OutputMedian: 8, APIKey: "sk-first"})
	for _, tt := range []struct{ name, authorization string }{
		{"no header", ""},
		{"wrong key", "Bearer sk-wrong"},
		{"key as a prefix", "Bearer sk-firs"},
		{"other scheme", "Basic sk-first"},
		{"no scheme", "sk-first"},
	} {
		if status, body := chatWith(t, ts, tt.authorization); status != http.StatusUnauthorized || body != unauthorizedBody {
			t.Errorf("%s: status %d body %q, want 401 %q", tt.name, status, body, unauthorizedBody)
		}
	}
	if status, body := call(t, http.MethodGet, ts.url+"/v1/models", "", nil); status != http.StatusUnauthorized || body != `{"error":"Unauthorized"}` {
		t.Errorf("GET /v1/models without the key: %d %q", status, body)
	}
	for _, authorization := range []string{"Bearer sk-first", "bearer sk-first"} {
		if status, body := chatWith(t, ts, authorization); status != http.StatusOK {
			t.Errorf("%q: status %d: %s", authorization, status, body)
		}
	}
	for _, path := range []string{"/health", "/metrics", "/admin/faults"} {
		if status, _ := call(t, http.MethodGet, ts.url+path, "", nil); status != http.StatusOK {
			t.Errorf("GET %s without a key: %d, want it open", path, status)
		}
	}
	if n := ts.Stats().Faults.Unauthorized; n != 6 {
		t.Errorf("Stats().Faults.Unauthorized = %d, want 6", n)
	}
	if rep, _ := adminCall(t, http.MethodGet, ts.url+"/admin/faults", http.StatusOK); !rep.APIKeyRequired || rep.Injected["unauthorized"] != 6 {
		t.Errorf("report: api_key_required %v, unauthorized %d; want true and 6", rep.APIKeyRequired, rep.Injected["unauthorized"])
	}
}

// rotate posts key to /admin/api-key and returns the report's text.
func rotate(t *testing.T, ts *testServer, key string) string {
	t.Helper()
	status, body := call(t, http.MethodPost, ts.url+"/admin/api-key", "", strings.NewReader(key))
	if status != http.StatusOK {
		t.Fatalf("POST /admin/api-key: %d %s", status, body)
	}
	return body
}

// TestAPIKeyRotation rotates the key while a stream runs: new requests
// need the new key, the stream goes on to its end, and an empty key
// lets everyone in.
func TestAPIKeyRotation(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Speed: 1, APIKey: "sk-old"})
	ts.key = "sk-old"
	// A stream long enough to outlive the rotation, read only in part.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := ts.post(ctx, t, map[string]any{"messages": userMessages("rotate under me"), "stream": true})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAtLeast(resp.Body, make([]byte, 64), 1); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}

	report := rotate(t, ts, "sk-new\n")
	if strings.Contains(report, "sk-new") || !strings.Contains(report, `"api_key_required": true`) {
		t.Errorf("report after the rotation:\n%s\nwant api_key_required true and no key", report)
	}
	if status, _ := chatWith(t, ts, "Bearer sk-old"); status != http.StatusUnauthorized {
		t.Errorf("old key after the rotation: %d, want 401", status)
	}
	if status, body := chatWith(t, ts, "Bearer sk-new"); status != http.StatusOK {
		t.Errorf("new key: %d %s", status, body)
	}
	if got := ts.Config().APIKey; got != "sk-new" {
		t.Errorf("Config().APIKey after the rotation is not the new key (%d bytes)", len(got))
	}
	// The stream that began under the old key still runs.
	if _, err := io.ReadAtLeast(resp.Body, make([]byte, 64), 1); err != nil {
		t.Errorf("stream after the rotation: %v", err)
	}

	if report := rotate(t, ts, ""); !strings.Contains(report, `"api_key_required": false`) {
		t.Errorf("report after removing the key:\n%s", report)
	}
	if status, body := chatWith(t, ts, ""); status != http.StatusOK {
		t.Errorf("no key once none is required: %d %s", status, body)
	}
}

func TestAPIKeyChecks(t *testing.T) {
	t.Parallel()
	for _, key := range []string{" sk-padded", "sk-padded\t", "sk-\x00nul", "sk-line\nbreak"} {
		err := Config{APIKey: key}.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), "api key must not") {
			t.Errorf("Validate with a bad key: %v", err)
		} else if strings.Contains(err.Error(), "sk-") {
			t.Errorf("Validate quotes the key: %v", err)
		}
	}
	ts := startServer(t, Config{Speed: 100})
	status, body := call(t, http.MethodPost, ts.url+"/admin/api-key", "", strings.NewReader("sk-one\nsk-two"))
	if status != http.StatusBadRequest || !strings.Contains(body, "control characters") || strings.Contains(body, "sk-") {
		t.Errorf("POST /admin/api-key with a line break inside: %d %s", status, body)
	}
	status, body = call(t, http.MethodPost, ts.url+"/admin/api-key", "", strings.NewReader(strings.Repeat("k", maxAPIKeyBytes+1)))
	if status != http.StatusBadRequest || !strings.Contains(body, "at most 4096 bytes") {
		t.Errorf("POST /admin/api-key with a huge body: %d %s", status, body)
	}
	if status, _ := chatWith(t, ts, ""); status != http.StatusOK {
		t.Errorf("a refused key took effect: chat without a key got %d", status)
	}
}

package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const testKey = "sk-test-0123456789abcdef"

// newTestServer starts h and returns a Client for it. opts adjust the
// Config before New. The request body is read before h runs: the server
// only notices a client hanging up once the body has been consumed, and
// handlers wait for that.
func newTestServer(t *testing.T, h http.HandlerFunc, opts ...func(*Config)) (*Client, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg := Config{BaseURL: srv.URL, APIKey: testKey}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, srv
}

// chunk describes one streamed chunk for tests.
type chunk struct {
	field  string // delta field carrying text: content, reasoning, reasoning_content
	text   string
	role   bool   // a first chunk carrying only the role
	finish string // finish_reason, if any
	usage  *Usage // usage object, if any
	final  bool   // the final usage chunk: choices is empty
	// fingerprint is the chunk's system_fingerprint: "" leaves the field
	// out (as vLLM does), "null" sends null.
	fingerprint string
}

func (c chunk) String() string {
	m := map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
	}
	if c.final {
		m["choices"] = []any{}
	} else {
		delta := map[string]any{}
		if c.role {
			delta["role"] = "assistant"
			delta["content"] = ""
		}
		if c.field != "" {
			delta[c.field] = c.text
		}
		var finish any
		if c.finish != "" {
			finish = c.finish
		}
		m["choices"] = []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}
	}
	switch c.fingerprint {
	case "":
	case "null":
		m["system_fingerprint"] = nil
	default:
		m["system_fingerprint"] = c.fingerprint
	}
	if c.usage != nil {
		m["usage"] = c.usage
	} else {
		m["usage"] = nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// startStream writes the headers of an event stream.
func startStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

// send writes one event and flushes it.
func send(w http.ResponseWriter, data string) {
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

// streamOf returns a handler that streams chunks then [DONE].
func streamOf(chunks ...chunk) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		for _, c := range chunks {
			send(w, c.String())
		}
		send(w, "[DONE]")
	}
}

// rawStream returns a handler that writes body as the event stream.
func rawStream(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}
}

// waitOrDone sleeps d on the server side, returning false if the client
// went away first.
func waitOrDone(r *http.Request, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

func userMessage(text string) ChatRequest {
	return ChatRequest{Model: "test-model", Messages: []Message{{Role: "user", Content: text}}}
}

// wantClass fails the test unless err is non-nil and of class want.
func wantClass(t *testing.T, err error, want Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want a %v error", want)
	}
	if got := Classify(err); got != want {
		t.Fatalf("Classify(%q) = %v, want %v", err, got, want)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("error contains the API key: %q", err)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestChatStreamReasoningShapes(t *testing.T) {
	usage := &Usage{PromptTokens: 10, CompletionTokens: 6, TotalTokens: 16}
	separate := func(field string) []chunk {
		return []chunk{
			{role: true},
			{field: field, text: "Let me "},
			{field: field, text: "think."},
			{field: "content", text: "The answer "},
			{field: "content", text: "is 4."},
			{finish: "stop"},
			{final: true, usage: usage},
		}
	}
	tests := []struct {
		name   string
		chunks []chunk
	}{
		{"vLLM reasoning", separate("reasoning")},
		{"SGLang reasoning_content", separate("reasoning_content")},
		{"inline think tags", []chunk{
			{role: true},
			{field: "content", text: "<think>\nLet me "},
			{field: "content", text: "think.\n</"},
			{field: "content", text: "think>\n\nThe answer "},
			{field: "content", text: "is 4.", finish: "stop"},
			{final: true, usage: usage},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body map[string]any
			var auth string
			c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				auth = r.Header.Get("Authorization")
				if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
					http.Error(w, "wrong endpoint "+r.Method+" "+r.URL.Path, http.StatusNotFound)
					return
				}
				if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				streamOf(tt.chunks...)(w, r)
			})
			req := userMessage("2+2?")
			req.MaxTokens = 100
			temp := 0.6
			req.Temperature = &temp
			got, err := c.ChatStream(testContext(t), req, nil)
			if err != nil {
				t.Fatalf("ChatStream: %v", err)
			}
			if got.Reasoning != "Let me think." || got.Content != "The answer is 4." {
				t.Errorf("reasoning %q, content %q", got.Reasoning, got.Content)
			}
			if got.FinishReason != "stop" || got.Usage != *usage || got.ID != "chatcmpl-1" || got.Model != "test-model" {
				t.Errorf("got %+v", got)
			}
			if got.Chunks != len(tt.chunks) {
				t.Errorf("Chunks = %d, want %d", got.Chunks, len(tt.chunks))
			}
			if got.TTFT <= 0 || got.TTFT > got.Latency {
				t.Errorf("TTFT %v, Latency %v", got.TTFT, got.Latency)
			}
			if auth != "Bearer "+testKey {
				t.Errorf("Authorization = %q", auth)
			}
			wantBody := map[string]any{
				"model":          "test-model",
				"messages":       []any{map[string]any{"role": "user", "content": "2+2?"}},
				"max_tokens":     100.0,
				"temperature":    0.6,
				"stream":         true,
				"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true},
			}
			if !reflect.DeepEqual(body, wantBody) {
				t.Errorf("request body\n got %v\nwant %v", body, wantBody)
			}
		})
	}
}

func TestChatStreamInlineThinkVariants(t *testing.T) {
	tests := []struct {
		name, text, finish      string
		wantReasoning, wantText string
	}{
		{"think opened in the prompt", "I should add.\n</think>\n\nIt is 4.", "stop", "I should add.", "It is 4."},
		{"unterminated think", "  <think>\nstill thinking when cut", "length", "still thinking when cut", ""},
		{"no think at all", "Just 4.", "stop", "", "Just 4."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var chunks []chunk
			for _, piece := range strings.SplitAfter(tt.text, " ") {
				chunks = append(chunks, chunk{field: "content", text: piece})
			}
			chunks = append(chunks, chunk{finish: tt.finish})
			c, _ := newTestServer(t, streamOf(chunks...))
			got, err := c.ChatStream(testContext(t), userMessage("q"), nil)
			if err != nil {
				t.Fatalf("ChatStream: %v", err)
			}
			if got.Reasoning != tt.wantReasoning || got.Content != tt.wantText || got.FinishReason != tt.finish {
				t.Errorf("got reasoning %q content %q finish %q", got.Reasoning, got.Content, got.FinishReason)
			}
		})
	}
}

// progressLog records Progress calls.
func progressLog(calls *[]int) Progress {
	return func(tokens int) { *calls = append(*calls, tokens) }
}

func TestChatStreamTokensFromContinuousUsage(t *testing.T) {
	u := func(n int) *Usage { return &Usage{PromptTokens: 5, CompletionTokens: n, TotalTokens: 5 + n} }
	c, _ := newTestServer(t, streamOf(
		chunk{role: true, usage: u(0)},
		chunk{field: "reasoning", text: "a", usage: u(1)},
		chunk{field: "reasoning", text: "bc", usage: u(3)}, // two tokens in one chunk
		chunk{field: "content", text: "", usage: u(3)},     // nothing new
		chunk{field: "content", text: "d", usage: u(4), finish: "stop"},
		chunk{final: true, usage: u(4)},
	))
	var calls []int
	got, err := c.ChatStream(testContext(t), userMessage("q"), progressLog(&calls))
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if want := []int{1, 2, 1}; !reflect.DeepEqual(calls, want) {
		t.Errorf("progress calls %v, want %v", calls, want)
	}
	if got.Usage.CompletionTokens != 4 {
		t.Errorf("usage %+v", got.Usage)
	}
}

func TestChatStreamTokensWithoutContinuousUsage(t *testing.T) {
	text := func(s string) chunk { return chunk{field: "content", text: s} }
	t.Run("final usage reconciles", func(t *testing.T) {
		c, _ := newTestServer(t, streamOf(chunk{role: true}, text("a"), text("b"), text("c"),
			chunk{finish: "stop"}, chunk{final: true, usage: &Usage{PromptTokens: 2, CompletionTokens: 5, TotalTokens: 7}}))
		var calls []int
		got, err := c.ChatStream(testContext(t), userMessage("q"), progressLog(&calls))
		if err != nil {
			t.Fatalf("ChatStream: %v", err)
		}
		if want := []int{1, 1, 1, 2}; !reflect.DeepEqual(calls, want) {
			t.Errorf("progress calls %v, want %v", calls, want)
		}
		if got.Usage.TotalTokens != 7 {
			t.Errorf("usage %+v", got.Usage)
		}
	})
	t.Run("no usage at all", func(t *testing.T) {
		c, _ := newTestServer(t, streamOf(text("a"), text("b"), chunk{finish: "length"}))
		var calls []int
		got, err := c.ChatStream(testContext(t), userMessage("q"), progressLog(&calls))
		if err != nil {
			t.Fatalf("ChatStream: %v", err)
		}
		if want := []int{1, 1}; !reflect.DeepEqual(calls, want) {
			t.Errorf("progress calls %v, want %v", calls, want)
		}
		if got.Usage != (Usage{}) || got.FinishReason != "length" {
			t.Errorf("got %+v", got)
		}
	})
}

func TestChatStreamTTFT(t *testing.T) {
	const queued, prefill = 150 * time.Millisecond, 100 * time.Millisecond
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		// Like vLLM: nothing, not even headers, until the request runs.
		if !waitOrDone(r, queued) {
			return
		}
		startStream(w)
		send(w, chunk{role: true}.String()) // no text: does not end TTFT
		if !waitOrDone(r, prefill) {
			return
		}
		send(w, chunk{field: "reasoning", text: "x"}.String())
		if !waitOrDone(r, 50*time.Millisecond) {
			return
		}
		send(w, chunk{field: "content", text: "y", finish: "stop"}.String())
		send(w, "[DONE]")
	})
	got, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if got.TTFT < queued+prefill {
		t.Errorf("TTFT %v shorter than the server's delay %v", got.TTFT, queued+prefill)
	}
	if got.Latency < got.TTFT {
		t.Errorf("Latency %v shorter than TTFT %v", got.Latency, got.TTFT)
	}
}

func TestChatStreamEndsEarly(t *testing.T) {
	text := chunk{field: "content", text: "partial"}.String()
	tests := []struct {
		name, body, want string
	}{
		{"no DONE", "data: " + text + "\n\ndata: " + text + "\n\ndata: " + text + "\n\n",
			"stream ended early after 3 chunks (no [DONE])"},
		{"no finish_reason", "data: " + text + "\n\ndata: [DONE]\n\n",
			"stream ended early after 1 chunks (no finish_reason)"},
		{"empty body", "", "stream ended early after 0 chunks"},
		{"event cut before its blank line", "data: " + text + "\n\ndata: " + text[:20], "after 1 chunks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newTestServer(t, rawStream(tt.body))
			_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
			wantClass(t, err, Transient)
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), srv.URL+"/v1/chat/completions") {
				t.Errorf("error %q, want it to name the URL and contain %q", err, tt.want)
			}
		})
	}
}

func TestChatStreamConnectionCut(t *testing.T) {
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		send(w, chunk{field: "content", text: "a"}.String())
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		// Half a chunk of the chunked encoding, then the connection drops.
		_, _ = buf.WriteString("40\r\ndata: {\"choi")
		_ = buf.Flush()
		_ = conn.Close()
	})
	_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	wantClass(t, err, Transient)
	if !strings.Contains(err.Error(), "after 1 chunks") {
		t.Errorf("error %q does not say how far the stream got", err)
	}
}

func TestChatStreamBigLine(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	c, _ := newTestServer(t, streamOf(
		chunk{field: "reasoning", text: big},
		chunk{field: "content", text: "ok", finish: "stop"},
	))
	got, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if got.Reasoning != big || got.Content != "ok" {
		t.Errorf("reasoning of %d bytes, content %q", len(got.Reasoning), got.Content)
	}
}

func TestChatStreamEventStreamVariants(t *testing.T) {
	a := chunk{field: "content", text: "a"}.String()
	b := chunk{field: "content", text: "b", finish: "stop"}.String()
	tests := []struct{ name, body string }{
		{"comments and other fields", ": keep-alive\n\nevent: message\nid: 1\nretry: 10\ndata: " + a + "\n\n: ping\ndata: " + b + "\n\ndata: [DONE]\n\n"},
		{"CRLF line endings", "data: " + a + "\r\n\r\ndata: " + b + "\r\n\r\ndata: [DONE]\r\n\r\n"},
		{"no space after colon", "data:" + a + "\n\ndata:" + b + "\n\ndata:[DONE]\n\n"},
		{"no blank lines between events", "data: " + a + "\ndata: " + b + "\ndata: [DONE]\n"},
		{"DONE without newline", "data: " + a + "\n\ndata: " + b + "\n\ndata: [DONE]"},
		{"one JSON value over two data lines", "data: " + a[:10] + "\ndata: " + a[10:] + "\n\ndata: " + b + "\n\ndata: [DONE]\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestServer(t, rawStream(tt.body))
			got, err := c.ChatStream(testContext(t), userMessage("q"), nil)
			if err != nil {
				t.Fatalf("ChatStream: %v", err)
			}
			if got.Content != "ab" || got.Chunks != 2 || got.FinishReason != "stop" {
				t.Errorf("got %+v", got)
			}
		})
	}
}

func TestChatStreamInvalidJSON(t *testing.T) {
	c, _ := newTestServer(t, rawStream("data: "+chunk{field: "content", text: "a"}.String()+"\n\ndata: {\"choices\": [\n\n"))
	_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	wantClass(t, err, Transient)
	if !strings.Contains(err.Error(), "chunk 2 is not valid JSON") {
		t.Errorf("error %q", err)
	}
}

// vLLM, when generation fails after a stream has started (engine death,
// CUDA error, any exception), sends an error event with its default code
// 400 and then [DONE]. That is the server's failure, not the prompt's.
func TestChatStreamErrorInStream(t *testing.T) {
	tests := []struct {
		name, data string
	}{
		{"vLLM after generation failed", `{"error": {"message": "CUDA error: an illegal memory access was encountered", "type": "BadRequestError", "param": null, "code": 400}}`},
		{"older vLLM, object inside error", `{"error": {"object": "error", "message": "EngineDeadError", "type": "BadRequestError", "param": null, "code": 400}}`},
		{"top level, server error", `{"object": "error", "message": "engine died", "type": "InternalServerError", "code": 500}`},
		{"no code", `{"error": {"message": "something"}}`},
		{"auth code", `{"error": {"message": "expired", "code": 401}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := "data: " + chunk{role: true}.String() + "\n\ndata: " + chunk{field: "content", text: "a"}.String() +
				"\n\ndata: " + tt.data + "\n\ndata: [DONE]\n\n"
			c, _ := newTestServer(t, rawStream(body))
			_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
			wantClass(t, err, Transient)
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != 0 || apiErr.Message == "" {
				t.Fatalf("error %#v is not an in-stream *APIError", err)
			}
			if !apiErr.InStream() {
				t.Error("InStream is false for an error event in a stream")
			}
			if !strings.Contains(err.Error(), "after 2 chunks: error in stream") {
				t.Errorf("error %q", err)
			}
		})
	}
}

// An error object as the body of a 200 response: the server accepted the
// request and failed, like an error event in a stream.
func TestErrorObjectInSuccessfulResponse(t *testing.T) {
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"error": {"message": "EngineCore encountered an issue", "type": "BadRequestError", "param": null, "code": 400}}`)
	})
	for name, call := range map[string]func() error{
		"Chat":                 func() error { _, err := c.Chat(testContext(t), userMessage("q")); return err },
		"ChatStream JSON body": func() error { _, err := c.ChatStream(testContext(t), userMessage("q"), nil); return err },
	} {
		err := call()
		wantClass(t, err, Transient)
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusOK || !apiErr.InStream() {
			t.Fatalf("%s: error %#v is not an *APIError with status 200 and InStream", name, err)
		}
		if !strings.Contains(err.Error(), "status 200 BadRequestError: EngineCore encountered an issue (code 400)") {
			t.Errorf("%s: error %q", name, err)
		}
	}
}

func TestChatStreamJSONInsteadOfStream(t *testing.T) {
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id": "x", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi", "reasoning": "r"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}`)
	})
	var calls []int
	got, err := c.ChatStream(testContext(t), userMessage("q"), progressLog(&calls))
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if !reflect.DeepEqual(calls, []int{2}) {
		t.Errorf("progress calls %v, want [2]", calls)
	}
	if got.Content != "hi" || got.Reasoning != "r" || got.Usage.TotalTokens != 3 {
		t.Errorf("got %+v", got)
	}
}

func TestChatStreamCancelMidStream(t *testing.T) {
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		for waitOrDone(r, 10*time.Millisecond) {
			send(w, chunk{field: "content", text: "tok "}.String())
		}
	})
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var canceledAt time.Time
	tokens := 0
	_, err := c.ChatStream(ctx, userMessage("q"), func(n int) {
		tokens += n
		if tokens == 3 {
			canceledAt = time.Now()
			cancel()
		}
	})
	wantClass(t, err, Canceled)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %q does not wrap context.Canceled", err)
	}
	if canceledAt.IsZero() {
		t.Fatal("never canceled")
	}
	if d := time.Since(canceledAt); d > time.Second {
		t.Errorf("returned %v after cancel", d)
	}
}

func TestChatStreamAbandonedPromptly(t *testing.T) {
	// After a bad chunk the server keeps generating; the client must not
	// wait for the rest of the answer before returning.
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		send(w, "{not json")
		for waitOrDone(r, 100*time.Millisecond) {
			send(w, chunk{field: "content", text: "x"}.String())
		}
	})
	start := time.Now()
	_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	wantClass(t, err, Transient)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("returned after %v", d)
	}
}

// serveCountingDials serves h on a test server, closed when the test
// ends, and returns its URL and a count of the connections it accepted.
func serveCountingDials(t *testing.T, h http.HandlerFunc) (url string, dials func() int) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			mu.Lock()
			n++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestChatStreamReusesConnections(t *testing.T) {
	// The response ends a little after [DONE]: the client must wait for
	// that end, or the connection cannot go back to the pool.
	url, dials := serveCountingDials(t, func(w http.ResponseWriter, r *http.Request) {
		streamOf(chunk{field: "content", text: "a", finish: "stop"})(w, r)
		waitOrDone(r, 20*time.Millisecond)
	})
	c, err := New(Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.ChatStream(testContext(t), userMessage("q"), nil); err != nil {
			t.Fatalf("ChatStream: %v", err)
		}
	}
	if n := dials(); n != 1 {
		t.Errorf("3 sequential streams used %d connections", n)
	}
}

func TestChatStreamCancelWithCause(t *testing.T) {
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		for waitOrDone(r, 10*time.Millisecond) {
			send(w, chunk{field: "content", text: "tok "}.String())
		}
	})
	ctx, cancel := context.WithCancelCause(testContext(t))
	defer cancel(nil)
	shutdown := errors.New("worker shutting down")
	_, err := c.ChatStream(ctx, userMessage("q"), func(int) { cancel(shutdown) })
	wantClass(t, err, Canceled)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, shutdown) {
		t.Errorf("error %q should wrap context.Canceled and the cause", err)
	}
}

func TestChatStreamInvalidRequest(t *testing.T) {
	c, _ := newTestServer(t, streamOf())
	nan := math.NaN()
	for name, req := range map[string]ChatRequest{
		"no messages":     {Model: "m"},
		"NaN temperature": {Model: "m", Messages: []Message{{Role: "user", Content: "q"}}, Temperature: &nan},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.ChatStream(testContext(t), req, nil)
			wantClass(t, err, Permanent)
		})
	}
}

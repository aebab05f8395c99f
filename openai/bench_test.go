package openai

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// benchStream is a typical stream's events: a role chunk, 64 text chunks
// with continuous usage and token ids (the last with the finish reason),
// a usage chunk.
func benchStream() [][]byte {
	events := [][]byte{[]byte(`{"id":"chatcmpl-5f2c1a","object":"chat.completion.chunk","created":1733000000,"model":"moonshotai/Kimi-K2.5","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":120,"total_tokens":120,"completion_tokens":0},"prompt_token_ids":[1,2,3]}`)}
	for i := range 64 {
		field, finish := "reasoning", "null"
		if i >= 32 {
			field = "content"
		}
		if i == 63 {
			finish = `"stop"`
		}
		events = append(events, []byte(strings.NewReplacer("FIELD", field, "FINISH", finish).Replace(
			`{"id":"chatcmpl-5f2c1a","object":"chat.completion.chunk","created":1733000000,"model":"moonshotai/Kimi-K2.5","choices":[{"index":0,"delta":{"FIELD":" word"},"logprobs":null,"finish_reason":FINISH,"token_ids":[1234]}],"usage":{"prompt_tokens":120,"total_tokens":121,"completion_tokens":1}}`)))
	}
	return append(events, []byte(`{"id":"chatcmpl-5f2c1a","object":"chat.completion.chunk","created":1733000000,"model":"moonshotai/Kimi-K2.5","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":64,"total_tokens":184}}`))
}

// benchStreamBody is benchStream as a server sends it: each event a
// data line, then [DONE].
func benchStreamBody() []byte {
	var raw bytes.Buffer
	for _, e := range benchStream() {
		raw.WriteString("data: ")
		raw.Write(e)
		raw.WriteString("\n\n")
	}
	raw.WriteString("data: [DONE]\n\n")
	return raw.Bytes()
}

// BenchmarkChatStream is one streamed chat completion of a typical
// answer (66 chunks with continuous usage and token ids) from an
// in-process server, request to assembled answer; the server's own
// allocations are counted too.
func BenchmarkChatStream(b *testing.B) {
	body := benchStreamBody()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	req := userMessage("q")
	b.ReportAllocs()
	for b.Loop() {
		comp, err := c.ChatStream(b.Context(), req, nil)
		if err != nil || comp.FinishReason != "stop" {
			b.Fatalf("%v %+v", err, comp)
		}
	}
}

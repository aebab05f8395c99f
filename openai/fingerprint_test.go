package openai

import (
	"io"
	"net/http"
	"testing"
)

// The simulator names itself in system_fingerprint; the client reports
// the field as the server sent it.
func TestSystemFingerprint(t *testing.T) {
	const sim = "aerie-simulator"
	t.Run("stream, first non-empty wins", func(t *testing.T) {
		c, _ := newTestServer(t, streamOf(
			chunk{role: true},
			chunk{field: "content", text: "a", fingerprint: "null"},
			chunk{field: "content", text: "b", fingerprint: sim},
			chunk{field: "content", text: "c", fingerprint: "fp_other", finish: "stop"},
			chunk{final: true, usage: &Usage{CompletionTokens: 3}},
		))
		got, err := c.ChatStream(testContext(t), userMessage("q"), nil)
		if err != nil {
			t.Fatalf("ChatStream: %v", err)
		}
		if got.SystemFingerprint != sim {
			t.Errorf("SystemFingerprint = %q, want %q", got.SystemFingerprint, sim)
		}
	})
	t.Run("stream without the field", func(t *testing.T) {
		c, _ := newTestServer(t, streamOf(chunk{field: "content", text: "a", finish: "stop"}))
		got, err := c.ChatStream(testContext(t), userMessage("q"), nil)
		if err != nil {
			t.Fatalf("ChatStream: %v", err)
		}
		if got.SystemFingerprint != "" {
			t.Errorf("SystemFingerprint = %q, want none", got.SystemFingerprint)
		}
	})
	whole := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id": "x", "object": "chat.completion", "model": "m", "system_fingerprint": "`+sim+`",
			"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
			"usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}`)
	}
	c, _ := newTestServer(t, whole)
	for name, call := range map[string]func() (*Completion, error){
		"Chat":                 func() (*Completion, error) { return c.Chat(testContext(t), userMessage("q")) },
		"ChatStream JSON body": func() (*Completion, error) { return c.ChatStream(testContext(t), userMessage("q"), nil) },
	} {
		got, err := call()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.SystemFingerprint != sim {
			t.Errorf("%s: SystemFingerprint = %q, want %q", name, got.SystemFingerprint, sim)
		}
	}
}

package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestChatReasoningShapes(t *testing.T) {
	const usage = `"usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}`
	tests := []struct {
		name, message string
	}{
		{"vLLM reasoning", `{"role": "assistant", "reasoning": "Let me think.", "content": "It is 4."}`},
		{"SGLang reasoning_content", `{"role": "assistant", "reasoning_content": "Let me think.", "content": "It is 4."}`},
		{"inline think tags", `{"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nIt is 4."}`},
		{"think opened in the prompt", `{"role": "assistant", "content": "Let me think.\n</think>\n\nIt is 4.", "reasoning": null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body map[string]any
			c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id": "chatcmpl-9", "object": "chat.completion", "model": "m",
					"choices": [{"index": 0, "message": `+tt.message+`, "finish_reason": "stop"}], `+usage+`}`)
			})
			got, err := c.Chat(testContext(t), userMessage("2+2?"))
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if got.Reasoning != "Let me think." || got.Content != "It is 4." {
				t.Errorf("reasoning %q, content %q", got.Reasoning, got.Content)
			}
			if got.ID != "chatcmpl-9" || got.FinishReason != "stop" || got.Usage.TotalTokens != 12 || got.Chunks != 0 {
				t.Errorf("got %+v", got)
			}
			if got.TTFT <= 0 || got.TTFT > got.Latency {
				t.Errorf("TTFT %v, Latency %v", got.TTFT, got.Latency)
			}
			if _, ok := body["stream"]; ok {
				t.Errorf("non-streaming request has a stream field: %v", body)
			}
			if _, ok := body["max_tokens"]; ok {
				t.Errorf("zero MaxTokens was sent: %v", body)
			}
		})
	}
}

func TestChatMalformedResponses(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"no choices", `{"id": "x", "choices": []}`, "no choices"},
		{"no finish reason", `{"choices": [{"index": 0, "message": {"content": "a"}}]}`, "no finish_reason"},
		{"not JSON", `<html>`, "malformed response"},
		{"wrong types", `{"choices": "many"}`, "malformed response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tt.body)
			})
			_, err := c.Chat(testContext(t), userMessage("q"))
			wantClass(t, err, Transient)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want %q", err, tt.want)
			}
		})
	}
}

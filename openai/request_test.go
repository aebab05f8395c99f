package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// sentBody runs req through Chat against a server that records the
// request body, and returns the body decoded.
func sentBody(t *testing.T, req ChatRequest) map[string]any {
	t.Helper()
	var body map[string]any
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id": "c", "model": "m", "choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]}`)
	})
	if _, err := c.Chat(testContext(t), req); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	return body
}

func TestRequestSendsSamplingFields(t *testing.T) {
	req := userMessage("q")
	req.TopK = ptr(20)
	req.MinP = ptr(0.05)
	req.PresencePenalty = ptr(0.5)
	req.FrequencyPenalty = ptr(-0.25)
	req.RepetitionPenalty = ptr(1.1)
	req.Seed = ptr(int64(42))
	req.Stop = []string{"</answer>", "\n\nUser:"}
	req.ReasoningEffort = "high"
	req.ChatTemplateKwargs = json.RawMessage(`{"enable_thinking": true, "nested": {"a": [1, 2]}}`)
	req.ReturnTokenIDs = true
	body := sentBody(t, req)
	want := map[string]any{
		"top_k":                20.0,
		"min_p":                0.05,
		"presence_penalty":     0.5,
		"frequency_penalty":    -0.25,
		"repetition_penalty":   1.1,
		"seed":                 42.0,
		"stop":                 []any{"</answer>", "\n\nUser:"},
		"reasoning_effort":     "high",
		"chat_template_kwargs": map[string]any{"enable_thinking": true, "nested": map[string]any{"a": []any{1.0, 2.0}}},
		"return_token_ids":     true,
	}
	for k, v := range want {
		if !reflect.DeepEqual(body[k], v) {
			t.Errorf("%s = %#v, want %#v", k, body[k], v)
		}
	}

	// Unset fields are left out, so the server's defaults apply.
	plain := sentBody(t, userMessage("q"))
	for k := range want {
		if _, ok := plain[k]; ok {
			t.Errorf("unset %s was sent: %v", k, plain[k])
		}
	}
	// Zero values that were set are sent: 0 is a valid seed and top_k.
	req = userMessage("q")
	req.Seed, req.TopK, req.MinP = ptr(int64(0)), ptr(0), ptr(0.0)
	zero := sentBody(t, req)
	for _, k := range []string{"seed", "top_k", "min_p"} {
		if zero[k] != 0.0 {
			t.Errorf("%s = %#v, want 0", k, zero[k])
		}
	}
}

func TestRequestExtraBodyWins(t *testing.T) {
	req := userMessage("q")
	req.TopK = ptr(20)
	req.Temperature = ptr(0.7)
	req.ReturnTokenIDs = true
	req.ExtraBody = json.RawMessage(`{"top_k": 5, "temperature": null, "guided_json": {"type": "object"}, "priority": -1}`)
	body := sentBody(t, req)
	if body["top_k"] != 5.0 {
		t.Errorf("top_k = %v, want the extra body's 5", body["top_k"])
	}
	if v, ok := body["temperature"]; !ok || v != nil {
		t.Errorf("temperature = %v (present %v), want the extra body's null", v, ok)
	}
	if !reflect.DeepEqual(body["guided_json"], map[string]any{"type": "object"}) || body["priority"] != -1.0 {
		t.Errorf("extra keys not sent: %v", body)
	}
	// The fields the extra body does not name are kept.
	if body["return_token_ids"] != true || body["model"] != "test-model" {
		t.Errorf("fields lost in the merge: %v", body)
	}
	if msgs, ok := body["messages"].([]any); !ok || len(msgs) != 1 {
		t.Errorf("messages lost in the merge: %v", body["messages"])
	}
}

func TestRequestExtraBodyStreaming(t *testing.T) {
	req := userMessage("q")
	req.ExtraBody = json.RawMessage(`{"top_k": 3}`)
	b, err := req.encode(true, Dialect{})
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	if body["stream"] != true || body["top_k"] != 3.0 {
		t.Errorf("body %s", b)
	}
	if o, ok := body["stream_options"].(map[string]any); !ok || o["include_usage"] != true {
		t.Errorf("stream options lost: %s", b)
	}
}

func TestRequestReasoningContentOfEarlierTurns(t *testing.T) {
	req := ChatRequest{Model: "test-model", Messages: []Message{
		{Role: "user", Content: "2+2?"},
		{Role: "assistant", Content: "4", ReasoningContent: "Two and two make four."},
		{Role: "user", Content: "and 3+3?"},
	}}
	body := sentBody(t, req)
	msgs := body["messages"].([]any)
	if got := msgs[1].(map[string]any)["reasoning_content"]; got != "Two and two make four." {
		t.Errorf("assistant reasoning_content = %v", got)
	}
	for _, i := range []int{0, 2} {
		if _, ok := msgs[i].(map[string]any)["reasoning_content"]; ok {
			t.Errorf("message %d has reasoning_content: %v", i, msgs[i])
		}
	}
}

func TestRequestRefusesBadObjects(t *testing.T) {
	bad := []string{`[1, 2]`, `"text"`, `null`, `3`, `{"a": `, `{"a": 1} {"b": 2}`, `  `}
	var calls atomic.Int32
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "unexpected", http.StatusTeapot)
	})
	for _, raw := range bad {
		for _, field := range []string{"chat template kwargs", "extra body"} {
			req := userMessage("q")
			if field == "extra body" {
				req.ExtraBody = json.RawMessage(raw)
			} else {
				req.ChatTemplateKwargs = json.RawMessage(raw)
			}
			_, err := c.Chat(testContext(t), req)
			wantClass(t, err, Permanent)
			if !strings.Contains(err.Error(), field+" must be a JSON object") {
				t.Errorf("%s %q: error %q", field, raw, err)
			}
			_, err = c.ChatStream(testContext(t), req, nil)
			wantClass(t, err, Permanent)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d bad requests reached the server", n)
	}
}

func TestWholeResponseTokenIDs(t *testing.T) {
	answer := func(extra, choiceExtra string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id": "c", "model": "m", `+extra+`"choices": [{"index": 0, `+choiceExtra+
				`"message": {"role": "assistant", "reasoning": "r", "content": "a b"}, "finish_reason": "stop"}],
				"usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}}`)
		}
	}
	c, _ := newTestServer(t, answer(`"prompt_token_ids": [1, 2, 3, 4], `, `"token_ids": [10, 11, 12], `))
	got, err := c.Chat(testContext(t), userMessage("q"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.PromptTokenIDs, []int{1, 2, 3, 4}) || !reflect.DeepEqual(got.TokenIDs, []int{10, 11, 12}) {
		t.Errorf("prompt ids %v, ids %v", got.PromptTokenIDs, got.TokenIDs)
	}
	for name, h := range map[string]http.HandlerFunc{
		"absent": answer("", ""),
		"null":   answer(`"prompt_token_ids": null, `, `"token_ids": null, `),
	} {
		c, _ := newTestServer(t, h)
		got, err := c.Chat(testContext(t), userMessage("q"))
		if err != nil {
			t.Fatal(err)
		}
		if got.PromptTokenIDs != nil || got.TokenIDs != nil {
			t.Errorf("%s: prompt ids %v, ids %v, want nil", name, got.PromptTokenIDs, got.TokenIDs)
		}
	}
}

func TestStreamTokenIDs(t *testing.T) {
	const head = `{"id": "c", "object": "chat.completion.chunk", "model": "m", `
	body := "data: " + head + `"prompt_token_ids": [7, 8, 9], "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}` + "\n\n" +
		"data: " + head + `"choices": [{"index": 0, "delta": {"reasoning": "hmm so "}, "token_ids": [101, 102], "finish_reason": null}]}` + "\n\n" +
		"data: " + head + `"choices": [{"index": 1, "delta": {"content": "other"}, "token_ids": [999], "finish_reason": null}]}` + "\n\n" +
		"data: " + head + `"choices": [{"index": 0, "delta": {"content": "lorem "}, "token_ids": [201], "finish_reason": null}]}` + "\n\n" +
		"data: " + head + `"choices": [{"index": 0, "delta": {"content": "ipsum"}, "token_ids": [202, 203], "finish_reason": "stop"}]}` + "\n\n" +
		"data: " + head + `"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}` + "\n\n" +
		"data: [DONE]\n\n"
	c, _ := newTestServer(t, rawStream(body))
	got, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.PromptTokenIDs, []int{7, 8, 9}) {
		t.Errorf("prompt ids %v", got.PromptTokenIDs)
	}
	if !reflect.DeepEqual(got.TokenIDs, []int{101, 102, 201, 202, 203}) {
		t.Errorf("ids %v, want those of choice 0 in order", got.TokenIDs)
	}
	if len(got.TokenIDs) != got.Usage.CompletionTokens || got.Content != "lorem ipsum" || got.Reasoning != "hmm so " {
		t.Errorf("completion %+v", got)
	}

	// A stream without ids leaves both nil.
	c, _ = newTestServer(t, streamOf(
		chunk{role: true},
		chunk{field: "content", text: "hi", finish: "stop"},
		chunk{final: true, usage: &Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}},
	))
	got, err = c.ChatStream(testContext(t), userMessage("q"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.PromptTokenIDs != nil || got.TokenIDs != nil {
		t.Errorf("prompt ids %v, ids %v, want nil", got.PromptTokenIDs, got.TokenIDs)
	}
}

// A request without the new options is byte for byte what it was before
// they existed, so servers see no change.
func TestRequestBodyUnchangedWithoutOptions(t *testing.T) {
	req := userMessage("q")
	req.MaxTokens = 100
	req.Temperature = ptr(0.6)
	b, err := req.encode(true, Dialect{})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"model":"test-model","messages":[{"role":"user","content":"q"}],"max_tokens":100,"temperature":0.6,` +
		`"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`
	if string(b) != want {
		t.Errorf("body\n%s\nwant\n%s", b, want)
	}
}

func BenchmarkEncode(b *testing.B) {
	req := userMessage(strings.Repeat("a question of some length ", 40))
	req.Temperature = ptr(0.6)
	req.Seed = ptr(int64(1))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := req.encode(true, Dialect{}); err != nil {
			b.Fatal(err)
		}
	}
}

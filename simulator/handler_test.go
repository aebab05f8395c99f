package simulator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// shortAnswers is a config whose answers take a fraction of a second of
// wall time, long enough to span several stream chunks.
func shortAnswers(field string) Config {
	return Config{Speed: 10, ReasoningField: field, OutputMedian: 60, OutputSigma: 0.2, Seed: 3}
}

var allFields = []string{ReasoningFieldReasoning, ReasoningFieldReasoningContent, ReasoningFieldThink}

// splitThink splits inline content into reasoning and answer text.
func splitThink(t *testing.T, content string) (reasoning, answer string) {
	t.Helper()
	rest, ok := strings.CutPrefix(content, thinkOpen)
	if !ok {
		t.Fatalf("content does not start with %s: %.60q", thinkOpen, content)
	}
	reasoning, answer, ok = strings.Cut(rest, thinkClose)
	if !ok {
		t.Fatalf("no %s in content", thinkClose)
	}
	return reasoning, answer
}

// checkText checks that reasoning and content use their own words and
// together have one word per completion token.
func checkText(t *testing.T, reasoning, content string, tokens int) {
	t.Helper()
	rIn, rOut := countWords(reasoning, reasoningWords)
	cIn, cOut := countWords(content, contentWords)
	if rOut != 0 || cOut != 0 {
		t.Errorf("%d reasoning and %d content words from the wrong list", rOut, cOut)
	}
	if rIn == 0 || cIn == 0 {
		t.Errorf("want both parts: %d reasoning words, %d content words", rIn, cIn)
	}
	if rIn+cIn != tokens {
		t.Errorf("%d+%d words for %d completion tokens", rIn, cIn, tokens)
	}
}

func TestStreamingShape(t *testing.T) {
	for _, field := range allFields {
		t.Run(field, func(t *testing.T) {
			ts := startServer(t, shortAnswers(field))
			messages := userMessages("stream shape")
			want := ts.OutputTokens(messages, 0)
			chunks := ts.stream(t, map[string]any{
				"model": DefaultModel, "messages": messages,
				"stream_options": map[string]any{"include_usage": true},
			})
			if len(chunks) < 4 {
				t.Fatalf("only %d chunks", len(chunks))
			}
			first := chunks[0]
			if !strings.HasPrefix(first.ID, "chatcmpl-") || first.Object != "chat.completion.chunk" || first.Model != DefaultModel {
				t.Errorf("first chunk header: %+v", first)
			}
			if d := first.Choices[0].Delta; len(d) != 2 || d["role"] != "assistant" || d["content"] != "" {
				t.Errorf("first delta %v, want role and empty content", d)
			}
			final := chunks[len(chunks)-1]
			if len(final.Choices) != 0 || final.Usage == nil {
				t.Fatalf("last chunk is not a usage chunk: %+v", final)
			}
			if u := *final.Usage; u.CompletionTokens != want || u.PromptTokens != promptTokens(messages) || u.TotalTokens != u.PromptTokens+want {
				t.Errorf("usage %+v, want %d completion tokens", u, want)
			}
			var reasoning, content strings.Builder
			seenContent := false
			for i, c := range chunks {
				if c.SystemFingerprint != schema.SimulatedFingerprint {
					t.Errorf("chunk %d: system_fingerprint %q, want %q", i, c.SystemFingerprint, schema.SimulatedFingerprint)
				}
			}
			body := chunks[1 : len(chunks)-1]
			for i, c := range body {
				if c.ID != first.ID || len(c.Choices) != 1 {
					t.Fatalf("chunk %d: %+v", i, c)
				}
				if c.Usage != nil {
					t.Errorf("chunk %d has usage without continuous_usage_stats", i)
				}
				ch := c.Choices[0]
				if (ch.Finish != nil) != (i == len(body)-1) {
					t.Errorf("chunk %d of %d: finish_reason %v", i, len(body), ch.Finish)
				}
				for k, v := range ch.Delta {
					s, _ := v.(string)
					switch {
					case k == "content":
						seenContent = true
						content.WriteString(s)
					case k == field && field != ReasoningFieldThink:
						if seenContent {
							t.Errorf("chunk %d: reasoning after content", i)
						}
						reasoning.WriteString(s)
					default:
						t.Errorf("chunk %d: unexpected delta field %q", i, k)
					}
				}
			}
			if f := body[len(body)-1].Choices[0].Finish; f == nil || *f != finishStop {
				t.Errorf("finish_reason %v, want stop", f)
			}
			r, c := reasoning.String(), content.String()
			if field == ReasoningFieldThink {
				r, c = splitThink(t, c)
			}
			checkText(t, r, c, want)
		})
	}
}

func TestNonStreaming(t *testing.T) {
	for _, field := range allFields {
		t.Run(field, func(t *testing.T) {
			ts := startServer(t, shortAnswers(field))
			messages := userMessages("not streamed")
			body := map[string]any{"messages": messages, "temperature": 0.6, "top_p": 0.95, "seed": 5}
			want := ts.predict(t, body).tokens
			d := ts.complete(t, body)
			if d.Object != "chat.completion" || len(d.Choices) != 1 {
				t.Fatalf("response %+v", d)
			}
			if d.SystemFingerprint != schema.SimulatedFingerprint {
				t.Errorf("system_fingerprint %q, want %q", d.SystemFingerprint, schema.SimulatedFingerprint)
			}
			ch := d.Choices[0]
			if ch.Finish == nil || *ch.Finish != finishStop || string(ch.Logprob) != "null" {
				t.Errorf("finish %v logprobs %s", ch.Finish, ch.Logprob)
			}
			if d.Usage == nil || d.Usage.CompletionTokens != want {
				t.Errorf("usage %+v, want %d completion tokens", d.Usage, want)
			}
			msg := ch.Message
			content, _ := msg["content"].(string)
			reasoning, _ := msg[field].(string)
			if msg["role"] != "assistant" {
				t.Errorf("role %v", msg["role"])
			}
			if field == ReasoningFieldThink {
				reasoning, content = splitThink(t, content)
			}
			for _, other := range []string{ReasoningFieldReasoning, ReasoningFieldReasoningContent} {
				if _, ok := msg[other]; ok && other != field {
					t.Errorf("message has %q as well", other)
				}
			}
			checkText(t, reasoning, content, want)
		})
	}
}

func TestContinuousUsage(t *testing.T) {
	ts := startServer(t, shortAnswers(ReasoningFieldReasoning))
	messages := userMessages("count as you go")
	chunks := ts.stream(t, map[string]any{
		"messages":       messages,
		"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true},
	})
	words := 0
	for i, c := range chunks {
		if c.Usage == nil {
			t.Fatalf("chunk %d has no usage", i)
		}
		for _, ch := range c.Choices {
			for k, v := range ch.Delta {
				if s, ok := v.(string); ok && k != "role" {
					words += len(strings.Fields(s))
				}
			}
		}
		if c.Usage.CompletionTokens != words {
			t.Errorf("chunk %d: usage says %d tokens, %d words sent", i, c.Usage.CompletionTokens, words)
		}
	}
	if want := ts.OutputTokens(messages, 0); words != want {
		t.Errorf("sent %d tokens, want %d", words, want)
	}
}

func TestChunksCoalesceAtHighSpeed(t *testing.T) {
	ts := startServer(t, Config{Speed: 2000, OutputMedian: 3000, OutputSigma: 0.1})
	messages := userMessages("fast")
	chunks := ts.stream(t, map[string]any{"messages": messages, "stream_options": map[string]any{"include_usage": true}})
	tokens := chunks[len(chunks)-1].Usage.CompletionTokens
	if tokens != ts.OutputTokens(messages, 0) {
		t.Errorf("usage %d tokens, want %d", tokens, ts.OutputTokens(messages, 0))
	}
	if len(chunks) > tokens/10 {
		t.Errorf("%d chunks for %d tokens: not coalesced", len(chunks), tokens)
	}
}

func TestLengthCap(t *testing.T) {
	ts := startServer(t, shortAnswers(ReasoningFieldReasoning))
	messages := userMessages("cut me short")
	if ts.OutputTokens(messages, 0) <= 5 {
		t.Fatal("answer too short for the test")
	}
	d := ts.complete(t, map[string]any{"messages": messages, "max_tokens": 5})
	ch := d.Choices[0]
	if ch.Finish == nil || *ch.Finish != finishLength || d.Usage.CompletionTokens != 5 {
		t.Errorf("finish %v usage %+v, want length after 5", ch.Finish, d.Usage)
	}
	if ch.Message["content"] != nil {
		t.Errorf("content %v, want null: cut inside the reasoning", ch.Message["content"])
	}
	if r, _ := ch.Message["reasoning"].(string); len(strings.Fields(r)) != 5 {
		t.Errorf("reasoning %q, want 5 words", r)
	}
	chunks := ts.stream(t, map[string]any{"messages": messages, "max_completion_tokens": 7,
		"stream_options": map[string]any{"include_usage": true}})
	last := chunks[len(chunks)-2].Choices[0]
	if last.Finish == nil || *last.Finish != finishLength || chunks[len(chunks)-1].Usage.CompletionTokens != 7 {
		t.Errorf("stream finish %v usage %+v, want length after 7", last.Finish, chunks[len(chunks)-1].Usage)
	}
}

// errorBody posts body and returns the status and decoded error.
func errorBody(t *testing.T, ts *testServer, body any) (int, errorInfo, map[string]any) {
	t.Helper()
	resp, err := ts.post(context.Background(), t, body)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e apiError
	var loose map[string]map[string]any
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	_ = json.Unmarshal(raw, &loose)
	return resp.StatusCode, e.Error, loose["error"]
}

func TestContextLength(t *testing.T) {
	ts := startServer(t, Config{MaxModelLen: 100, Speed: 100})
	messages := userMessages(strings.Repeat("a", 172)) // 43 + 4 + 3 = 50 tokens
	status, e, loose := errorBody(t, ts, map[string]any{"messages": messages, "max_tokens": 60})
	want := "This model's maximum context length is 100 tokens. However, you requested 110 tokens (50 in the messages, 60 in the completion). Please reduce the length of the messages or completion."
	if status != http.StatusBadRequest || e.Message != want || e.Type != "BadRequestError" || e.Code != 400 {
		t.Errorf("status %d error %+v", status, e)
	}
	if p, ok := loose["param"]; !ok || p != nil {
		t.Errorf("param %v (present %v), want null", p, ok)
	}
	status, e, _ = errorBody(t, ts, map[string]any{"messages": userMessages(strings.Repeat("a", 400))})
	if status != http.StatusBadRequest || !strings.Contains(e.Message, "maximum context length is 100 tokens") {
		t.Errorf("prompt alone too long: status %d error %+v", status, e)
	}
	// Without max_tokens the rest of the context is the limit.
	d := ts.complete(t, map[string]any{"messages": messages})
	if d.Usage.CompletionTokens > 50 {
		t.Errorf("%d completion tokens in a 50-token budget", d.Usage.CompletionTokens)
	}
}

// wantModelNotFound is vLLM's 404 body for a request naming model, byte
// for byte: pydantic's compact JSON, no final newline.
func wantModelNotFound(model string) string {
	return `{"error":{"message":"The model ` + "`" + model + "`" + ` does not exist.","type":"NotFoundError","param":"model","code":404}}`
}

// rawAnswer posts body and returns the status and the whole body.
func rawAnswer(t *testing.T, ts *testServer, body any) (int, string) {
	t.Helper()
	resp, err := ts.post(context.Background(), t, body)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp.StatusCode, string(raw)
}

func TestWrongModel(t *testing.T) {
	ts := startServer(t, Config{Speed: 100})
	status, body := rawAnswer(t, ts, map[string]any{"model": "gpt-x", "messages": userMessages("hi")})
	if want := wantModelNotFound("gpt-x"); status != http.StatusNotFound || body != want {
		t.Errorf("status %d body\n%s\nwant 404 and\n%s", status, body, want)
	}
	if n := ts.Stats().Faults.ModelNotFound; n != 1 {
		t.Errorf("Stats().Faults.ModelNotFound = %d, want 1", n)
	}
}

func TestBadRequests(t *testing.T) {
	ts := startServer(t, Config{Speed: 100, OutputMedian: 20})
	hi := userMessages("hi")
	tests := []struct {
		name string
		body any
	}{
		{"invalid json", `{"messages": [`},
		{"not an object", `[1, 2]`},
		{"empty messages", map[string]any{"messages": []Message{}}},
		{"no messages", map[string]any{"model": DefaultModel}},
		{"bad content", `{"messages": [{"role": "user", "content": 5}]}`},
		{"zero max_tokens", map[string]any{"messages": hi, "max_tokens": 0}},
		{"negative temperature", map[string]any{"messages": hi, "temperature": -1}},
		{"stream options without stream", map[string]any{"messages": hi, "stream_options": map[string]any{"include_usage": true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, e, _ := errorBody(t, ts, tt.body)
			if status != http.StatusBadRequest || e.Type != "BadRequestError" || e.Code != 400 || e.Message == "" {
				t.Errorf("status %d error %+v", status, e)
			}
		})
	}
	// Content as parts is accepted.
	d := ts.complete(t, map[string]any{"messages": []map[string]any{{"role": "user",
		"content": []map[string]any{{"type": "text", "text": "hi"}}}}})
	if d.Usage.PromptTokens != promptTokens(hi) {
		t.Errorf("parts prompt %d tokens, want %d", d.Usage.PromptTokens, promptTokens(hi))
	}
}

func TestHealthModelsMetrics(t *testing.T) {
	ts := startServer(t, Config{Speed: 100, MaxModelLen: 4096, OutputMedian: 20})
	resp, err := http.Get(ts.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Errorf("health %d %q", resp.StatusCode, body)
	}

	resp, err = http.Get(ts.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models modelList
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || models.Object != "list" || len(models.Data) != 1 {
		t.Fatalf("models %+v %v", models, err)
	}
	if m := models.Data[0]; m.ID != DefaultModel || m.Root != DefaultModel || m.MaxModelLen != 4096 || m.OwnedBy != "vllm" || m.Object != "model" {
		t.Errorf("model card %+v", m)
	}

	messages := userMessages("metrics")
	want := ts.OutputTokens(messages, 0)
	ts.complete(t, map[string]any{"messages": messages})
	for name, v := range map[string]float64{
		"vllm:num_requests_running":                                        0,
		"vllm:num_requests_waiting":                                        0,
		"vllm:kv_cache_usage_perc":                                         0,
		"vllm:num_preemptions_total":                                       0,
		"vllm:generation_tokens_total":                                     float64(want),
		"vllm:prompt_tokens_total":                                         float64(promptTokens(messages)),
		"vllm:request_success_total{engine=\"0\",finished_reason=\"stop\"": 1,
	} {
		if got := ts.scrape(t, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

// TestRequestsWaitForRun checks that a request sent before Run waits for
// the engine, and that one sent after it stops gets 503.
func TestRequestsWaitForRun(t *testing.T) {
	s, err := New(Config{Speed: 100, OutputMedian: 20})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ts := &testServer{Server: s, url: hs.URL}
	got := make(chan int, 1)
	go func() {
		resp, err := ts.post(context.Background(), t, map[string]any{"messages": userMessages("early")})
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	eventually(t, 5*time.Second, "request queued", func() bool { return s.Stats().Waiting == 1 })
	if resp, err := http.Get(hs.URL + "/health"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("health before Run: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	select {
	case code := <-got:
		if code != http.StatusOK {
			t.Errorf("queued request got %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("queued request did not finish after Run started")
	}
	if err := s.Run(ctx); err == nil {
		t.Errorf("second Run returned nil")
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
	status, e, _ := errorBody(t, ts, map[string]any{"messages": userMessages("late")})
	if status != http.StatusServiceUnavailable || e.Code != 503 {
		t.Errorf("after Run: status %d error %+v", status, e)
	}
}

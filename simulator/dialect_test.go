package simulator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// status posts body and returns the status and body of the answer.
func (ts *testServer) status(t *testing.T, body map[string]any) (int, string) {
	t.Helper()
	resp, err := ts.post(context.Background(), t, body)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// get returns the status and body of GET path.
func (ts *testServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(ts.url + path)
	if err != nil {
		t.Fatalf("get %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func TestDialectsNameThemselves(t *testing.T) {
	for _, tc := range []struct {
		engine, ownedBy, reasoning, metricsPath, running string
	}{
		{EngineVLLM, "vllm", "reasoning", "/metrics", "vllm:num_requests_running"},
		{EngineSGLang, "sglang", "reasoning_content", "/metrics", "sglang:num_running_reqs"},
		{EngineTRTLLM, "tensorrt_llm", "reasoning_content", "/prometheus/metrics", "trtllm_num_requests_running"},
		{EngineLlamaCpp, "llamacpp", "reasoning_content", "/metrics", "llamacpp:requests_processing"},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			ts := startServer(t, Config{Engine: tc.engine, Speed: 1000, OutputMedian: 20})
			_, models := ts.get(t, "/v1/models")
			if !strings.Contains(models, `"owned_by":"`+tc.ownedBy+`"`) {
				t.Errorf("/v1/models = %s, want owned_by %q", models, tc.ownedBy)
			}
			d := ts.complete(t, map[string]any{"messages": userMessages("hello there")})
			if _, ok := d.Choices[0].Message[tc.reasoning]; !ok {
				t.Errorf("message %v has no %s", d.Choices[0].Message, tc.reasoning)
			}
			code, text := ts.get(t, tc.metricsPath)
			if code != http.StatusOK || !strings.Contains(text, tc.running) {
				t.Errorf("GET %s: %d, want %s in:\n%.300s", tc.metricsPath, code, tc.running, text)
			}
			if tc.metricsPath != "/metrics" {
				if code, text := ts.get(t, "/metrics"); code != http.StatusOK || !json.Valid([]byte(text)) {
					t.Errorf("GET /metrics of %s: %d %q, want JSON", tc.engine, code, text)
				}
			}
		})
	}
}

func TestTRTLLMRefusesFieldsItDoesNotKnow(t *testing.T) {
	ts := startServer(t, Config{Engine: EngineTRTLLM, Speed: 1000, OutputMedian: 20})
	msgs := userMessages("hello")
	for _, body := range []map[string]any{
		{"messages": msgs, "return_token_ids": true},
		{"messages": msgs, "stream": true, "stream_options": map[string]any{"include_usage": true, "extra": 1}},
	} {
		code, text := ts.status(t, body)
		if code != http.StatusBadRequest || !strings.Contains(text, "Extra inputs are not permitted") {
			t.Errorf("%v: %d %s, want 400 extra_forbidden", body, code, text)
		}
	}
	ok := map[string]any{"messages": msgs, "top_k": 20, "min_p": 0.1, "repetition_penalty": 1.05, "chat_template_kwargs": map[string]any{"thinking": true},
		"stream": true, "stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}, "priority": 0.25}
	if code, text := ts.status(t, ok); code != http.StatusOK {
		t.Errorf("TensorRT-LLM's own fields refused: %d %s", code, text)
	}
	for _, p := range []any{1.5, -0.1, "high"} {
		if code, _ := ts.status(t, map[string]any{"messages": msgs, "priority": p}); code != http.StatusBadRequest {
			t.Errorf("priority %v: %d, want 400", p, code)
		}
	}
}

func TestSGLangTokenIDsOnlyUnstreamed(t *testing.T) {
	ts := startServer(t, Config{Engine: EngineSGLang, Speed: 1000, OutputMedian: 20})
	msgs := userMessages("hello")
	code, text := ts.status(t, map[string]any{"messages": msgs, "stream": true, "return_token_ids": true})
	if code != http.StatusBadRequest || !strings.Contains(text, "not supported with streaming") {
		t.Errorf("streamed request for ids: %d %s, want 400", code, text)
	}
	d := ts.complete(t, map[string]any{"messages": msgs, "return_token_ids": true})
	if len(d.PromptTokenIDs) != 0 || len(d.Choices[0].TokenIDs) == 0 {
		t.Errorf("prompt ids beside the choices %v, answer ids %v: want none beside, answer ids on the choice", d.PromptTokenIDs, d.Choices[0].TokenIDs)
	}
	var raw struct {
		Choices []struct {
			PromptTokenIDs []int `json:"prompt_token_ids"`
		} `json:"choices"`
	}
	resp, err := ts.post(context.Background(), t, map[string]any{"messages": msgs, "return_token_ids": true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil || len(raw.Choices[0].PromptTokenIDs) == 0 {
		t.Errorf("no prompt ids on the choice: %+v, %v", raw, err)
	}
	_, info := ts.get(t, "/get_server_info")
	if !strings.Contains(info, `"enable_priority_scheduling":false`) {
		t.Errorf("/get_server_info = %s", info)
	}
}

func TestLlamaCppOneAnswerAndNoMetrics(t *testing.T) {
	ts := startServer(t, Config{Engine: EngineLlamaCpp, Speed: 1000, OutputMedian: 20, NoMetrics: true})
	if code, text := ts.status(t, map[string]any{"messages": userMessages("hi"), "n": 2}); code != http.StatusInternalServerError ||
		!strings.Contains(text, "Only one completion choice is allowed") {
		t.Errorf("n 2: %d %s, want llama.cpp's 500", code, text)
	}
	d := ts.complete(t, map[string]any{"messages": userMessages("hi"), "return_token_ids": true, "priority": 5})
	if len(d.Choices[0].TokenIDs) != 0 || len(d.PromptTokenIDs) != 0 {
		t.Errorf("llama.cpp returned token ids")
	}
	if code, _ := ts.get(t, "/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics without --metrics: %d, want 404", code)
	}
}

// TestPriorityOrderOfEachDialect checks that each dialect's priority
// field reads in its engine's direction, as the queue key.
func TestPriorityOrderOfEachDialect(t *testing.T) {
	for _, tc := range []struct {
		engine          string
		urgent, relaxed string
	}{
		{EngineVLLM, "-1", "10"},
		{EngineSGLang, "1", "-10"},
		{EngineTRTLLM, "0.9", "0.0"},
	} {
		d := dialects[tc.engine]
		u, err1 := d.queueKey(json.RawMessage(tc.urgent), true, false)
		r, err2 := d.queueKey(json.RawMessage(tc.relaxed), true, false)
		none, err3 := d.queueKey(nil, true, false)
		if err1 != nil || err2 != nil || err3 != nil || !(u < none && none < r) {
			t.Errorf("%s: keys urgent %d, unset %d, relaxed %d (%v %v %v): want urgent < unset < relaxed", tc.engine, u, none, r, err1, err2, err3)
		}
	}
	// SGLang with --schedule-low-priority-values-first runs vLLM's way.
	d := dialects[EngineSGLang]
	u, _ := d.queueKey(json.RawMessage("-1"), true, true)
	r, _ := d.queueKey(json.RawMessage("10"), true, true)
	if !(u < 0 && 0 < r) {
		t.Errorf("SGLang low values first: keys %d for -1 and %d for 10", u, r)
	}
}

// A full queue (SGLang's --max-queued-requests) refuses with 503.
func TestQueueFullRefuses(t *testing.T) {
	ts := startServer(t, Config{Engine: EngineSGLang, MaxNumSeqs: 1, MaxQueued: 1, OutputMedian: 5000, OutputSigma: 0.01})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	defer func() { cancel(); <-done; <-done }()
	// One runs, then one waits: sent one after the other, since a request
	// that came while the first still waited would find the queue full.
	// The waiting one has no response headers yet, hence the goroutines.
	for i, want := range []func(Stats) bool{
		func(st Stats) bool { return st.Running == 1 },
		func(st Stats) bool { return st.Running == 1 && st.Waiting == 1 },
	} {
		go func() {
			defer func() { done <- struct{}{} }()
			body := map[string]any{"messages": userMessages(fmt.Sprintf("a long one %d", i)), "stream": true}
			if resp, err := ts.post(ctx, t, body); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		eventually(t, 30*time.Second, fmt.Sprintf("%d requests in the engine", i+1), func() bool { return want(ts.Stats()) })
	}
	code, text := ts.status(t, map[string]any{"messages": userMessages("one more")})
	if code != http.StatusServiceUnavailable || !strings.Contains(text, "queue is full") {
		t.Fatalf("a third request: %d %s, want 503", code, text)
	}
}

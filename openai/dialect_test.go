package openai

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
)

func TestPriorityScales(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scale PriorityScale
		p     int
		want  string
	}{
		{"vllm batch", PriorityScale{}, 10, "10"},
		{"vllm none", PriorityScale{}, 0, ""},
		{"sglang batch ranks below interactive 0", PriorityScale{HigherFirst: true}, 10, "-10"},
		{"sglang urgent", PriorityScale{HigherFirst: true}, -3, "3"},
		{"trtllm batch", PriorityScale{Unit: 0.05, Default: 0.5}, 10, "0"},
		{"trtllm a little lower", PriorityScale{Unit: 0.05, Default: 0.5}, 2, "0.4"},
		{"trtllm held to the range", PriorityScale{Unit: 0.05, Default: 0.5}, -100, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(tc.scale.Encode(tc.p)); got != tc.want {
				t.Errorf("Encode(%d) = %q, want %q", tc.p, got, tc.want)
			}
		})
	}
}

// requestBody decodes a request body for inspection.
func requestBody(t *testing.T, r *http.Request) map[string]any {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("read body: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Errorf("body %s: %v", b, err)
	}
	return m
}

func TestTokenIDsUnstreamed(t *testing.T) {
	var body map[string]any
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		body = requestBody(t, r)
		w.Header().Set("Content-Type", "application/json")
		// SGLang's shape: the prompt's ids on the choice.
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,
			"message":{"role":"assistant","content":"hi","reasoning_content":"think"},"finish_reason":"stop",
			"prompt_token_ids":[1,2,3],"token_ids":[7,8]}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	}, func(c *Config) { c.Dialect = Dialect{TokenIDsUnstreamed: true} })
	req := userMessage("hello")
	req.ReturnTokenIDs = true
	var tokens int
	comp, err := c.ChatStream(testContext(t), req, func(n int) { tokens += n })
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if body["stream"] != nil || body["stream_options"] != nil || body["return_token_ids"] != true {
		t.Errorf("request %v: want unstreamed, with return_token_ids", body)
	}
	if fmt.Sprint(comp.PromptTokenIDs) != "[1 2 3]" || fmt.Sprint(comp.TokenIDs) != "[7 8]" {
		t.Errorf("ids = %v, %v", comp.PromptTokenIDs, comp.TokenIDs)
	}
	if comp.Reasoning != "think" || comp.Content != "hi" || tokens != 2 {
		t.Errorf("got %q %q, progress %d", comp.Reasoning, comp.Content, tokens)
	}
}

func TestSamplesAsRequests(t *testing.T) {
	var mu sync.Mutex
	seeds := map[float64]bool{}
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		body := requestBody(t, r)
		if body["n"] != nil {
			http.Error(w, `{"error":{"message":"Only one completion choice is allowed","code":400}}`, http.StatusBadRequest)
			return
		}
		seed, _ := body["seed"].(float64)
		mu.Lock()
		seeds[seed] = true
		mu.Unlock()
		text := fmt.Sprintf("answer %v", seed)
		streamOf(chunk{role: true}, chunk{field: "content", text: text},
			chunk{finish: "stop", usage: &Usage{PromptTokens: 5, CompletionTokens: int(seed) - 40, TotalTokens: 5 + int(seed) - 40}},
		)(w, r)
	}, func(c *Config) { c.Dialect = Dialect{SamplesAsRequests: true} })
	req := userMessage("hello")
	req.N = 3
	seed := int64(41)
	req.Seed = &seed
	var tokens int
	comp, err := c.ChatStream(testContext(t), req, func(n int) { tokens += n })
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if len(seeds) != 3 || !seeds[41] || !seeds[42] || !seeds[43] {
		t.Errorf("seeds sent %v, want 41, 42, 43 (seed+k)", seeds)
	}
	if len(comp.Choices) != 3 {
		t.Fatalf("%d choices, want 3", len(comp.Choices))
	}
	for k, ch := range comp.Choices {
		if want := fmt.Sprintf("answer %d", 41+k); ch.Content != want || ch.CompletionTokens != 1+k {
			t.Errorf("choice %d = %q (%d tokens), want %q (%d)", k, ch.Content, ch.CompletionTokens, want, 1+k)
		}
	}
	if comp.Usage != (Usage{PromptTokens: 5, CompletionTokens: 6, TotalTokens: 11}) || tokens != 6 {
		t.Errorf("usage %+v, progress %d; want the prompt once and 6 answer tokens", comp.Usage, tokens)
	}
}

func TestSamplesAsRequestsFailTogether(t *testing.T) {
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if requestBody(t, r)["seed"].(float64) == 2 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"busy","code":503}}`)
			return
		}
		streamOf(chunk{field: "content", text: "x"}, chunk{finish: "stop"})(w, r)
	}, func(c *Config) { c.Dialect = Dialect{SamplesAsRequests: true} })
	req := userMessage("hello")
	req.N = 3
	seed := int64(0)
	req.Seed = &seed
	_, err := c.ChatStream(testContext(t), req, nil)
	wantClass(t, err, Transient)
}

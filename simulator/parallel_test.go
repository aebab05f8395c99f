package simulator

import (
	"fmt"
	"strings"
	"testing"
)

// fastConfig is a server quick enough for tests of whole answers.
func fastConfig() Config {
	return Config{Speed: 1000, OutputMedian: 40, OutputSigma: 0.5}
}

// text is a choice's whole answer: its reasoning and content.
func (d decoded) text(k int) string {
	m := d.Choices[k].Message
	return fmt.Sprint(m["reasoning"], "|", m["content"])
}

// With n, a request gets n answers, and answer k is the one a request of
// its own with seed + k gets, as vLLM samples the children of a parallel
// sampling request; usage counts the prompt once and every answer.
func TestParallelSampling(t *testing.T) {
	ts := startServer(t, fastConfig())
	msgs := userMessages("tell me four things")
	got := ts.complete(t, map[string]any{"messages": msgs, "n": 4, "seed": 7, "temperature": 1.0})
	if len(got.Choices) != 4 {
		t.Fatalf("%d choices, want 4", len(got.Choices))
	}
	completion := 0
	texts := map[string]bool{}
	for k := range 4 {
		alone := ts.complete(t, map[string]any{"messages": msgs, "seed": 7 + k, "temperature": 1.0})
		if got.Choices[k].Index != k || got.text(k) != alone.text(0) || *got.Choices[k].Finish != *alone.Choices[0].Finish {
			t.Errorf("choice %d (index %d) differs from a request with seed %d alone", k, got.Choices[k].Index, 7+k)
		}
		completion += alone.Usage.CompletionTokens
		texts[got.text(k)] = true
	}
	if len(texts) != 4 {
		t.Errorf("%d different answers of 4", len(texts))
	}
	prompt := promptTokens(msgs)
	if u := got.Usage; u.PromptTokens != prompt || u.CompletionTokens != completion {
		t.Errorf("usage %+v, want the prompt once (%d) and %d completion tokens", *u, prompt, completion)
	}
	if r := ts.complete(t, map[string]any{"messages": msgs}); len(r.Choices) != 1 {
		t.Errorf("without n: %d choices", len(r.Choices))
	}
}

// Streamed, each answer comes under its index, with its own finish
// reason and, with continuous usage stats, its own token count; one
// usage chunk and [DONE] end the stream.
func TestParallelSamplingStream(t *testing.T) {
	ts := startServer(t, fastConfig())
	msgs := userMessages("stream three")
	whole := ts.complete(t, map[string]any{"messages": msgs, "n": 3, "seed": 3})
	chunks := ts.stream(t, map[string]any{"messages": msgs, "n": 3, "seed": 3,
		"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}})
	var text [3]strings.Builder
	var finish [3]string
	var last [3]int
	var final *usage
	for _, c := range chunks {
		if len(c.Choices) == 0 {
			final = c.Usage
			continue
		}
		for _, ch := range c.Choices {
			k := ch.Index
			if k < 0 || k > 2 {
				t.Fatalf("choice index %d", k)
			}
			if finish[k] != "" {
				t.Errorf("choice %d has a chunk after its finish reason", k)
			}
			if r, ok := ch.Delta["reasoning"].(string); ok {
				text[k].WriteString(r)
			}
			if ch.Finish != nil && *ch.Finish != "" {
				finish[k] = *ch.Finish
			}
			if c.Usage != nil {
				last[k] = c.Usage.CompletionTokens
			}
		}
	}
	total := 0
	for k := range 3 {
		m := whole.Choices[k].Message
		if text[k].String() != fmt.Sprint(m["reasoning"]) || finish[k] != *whole.Choices[k].Finish {
			t.Errorf("streamed choice %d differs from the same answer whole", k)
		}
		total += last[k]
	}
	if final == nil || final.CompletionTokens != whole.Usage.CompletionTokens || total != whole.Usage.CompletionTokens {
		t.Errorf("usage %+v, per-choice counts summing to %d; want %d", final, total, whole.Usage.CompletionTokens)
	}
}

// The n answers of one request read their prompt once; the same prompt
// asked again hits the cache; with the cache off, every answer reads it.
func TestPrefixCache(t *testing.T) {
	msgs := userMessages(strings.Repeat("a long shared prompt ", 40))
	prompt := promptTokens(msgs)
	cached := cachedTokens(prompt)
	if cached == 0 || cached >= prompt {
		t.Fatalf("prompt of %d tokens caches %d", prompt, cached)
	}
	ts := startServer(t, fastConfig())
	ts.complete(t, map[string]any{"messages": msgs, "n": 4, "seed": 1})
	queries, hits := ts.scrape(t, "vllm:prefix_cache_queries_total"), ts.scrape(t, "vllm:prefix_cache_hits_total")
	if queries != float64(4*prompt) || hits != float64(3*cached) {
		t.Errorf("n=4: queried %v, hit %v; want %d and %d", queries, hits, 4*prompt, 3*cached)
	}
	ts.complete(t, map[string]any{"messages": msgs})
	if hits := ts.scrape(t, "vllm:prefix_cache_hits_total"); hits != float64(4*cached) {
		t.Errorf("asked again: hit %v, want %d", hits, 4*cached)
	}
	if p := ts.scrape(t, "vllm:prompt_tokens_total"); p != float64(5*prompt) {
		t.Errorf("prompt tokens %v, want every answer's prompt counted (%d)", p, 5*prompt)
	}

	cfg := fastConfig()
	cfg.PrefixCache = -1
	off := startServer(t, cfg)
	off.complete(t, map[string]any{"messages": msgs, "n": 4, "seed": 1})
	if q, h := off.scrape(t, "vllm:prefix_cache_queries_total"), off.scrape(t, "vllm:prefix_cache_hits_total"); q != 0 || h != 0 {
		t.Errorf("cache off: queried %v, hit %v", q, h)
	}
}

// An n out of range is refused as vLLM refuses a bad parameter.
func TestParallelSamplingRefusesBadN(t *testing.T) {
	ts := startServer(t, fastConfig())
	for _, n := range []int{0, -1, maxN + 1} {
		resp, err := ts.post(t.Context(), t, map[string]any{"messages": userMessages("x"), "n": n})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("n=%d: status %d, want 400", n, resp.StatusCode)
		}
	}
}

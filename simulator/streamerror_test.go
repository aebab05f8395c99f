package simulator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// wantStreamError is the error event vLLM sends when generation fails
// after the stream began, byte for byte (json.dumps spacing).
const wantStreamError = `data: {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause. (Fault injected by the simulator.)", "type": "BadRequestError", "param": null, "code": 400}}` + "\n\n" +
	"data: [DONE]\n\n"

// TestStreamErrorEvent checks an injected stream error: the stream sends
// the tokens before the cut, then vLLM's error event and [DONE], with no
// finish reason and no usage chunk, and frees its slot; a non-streaming
// request gets vLLM's 500.
func TestStreamErrorEvent(t *testing.T) {
	t.Parallel()
	cfg := Config{Speed: 100, OutputMedian: 60, OutputSigma: 0.2, Seed: 4, Faults: Faults{StreamErrorRate: 1}}
	ts := startServer(t, cfg)
	messages := userMessages("fail part way")
	h, tokens := promptHash(messages, cfg.Seed), ts.OutputTokens(messages, 0)
	cutAt := cfg.Faults.decide(h, 0).cutAfter(tokens)
	if cutAt >= tokens {
		t.Fatalf("cut after %d of %d tokens: pick a prompt that is cut before its end", cutAt, tokens)
	}

	resp, err := ts.post(context.Background(), t, map[string]any{"messages": messages, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, read error %v: %s", resp.StatusCode, err, raw)
	}
	body, ok := strings.CutSuffix(string(raw), wantStreamError)
	if !ok {
		t.Fatalf("stream does not end with the error event and [DONE]:\n%s", raw)
	}
	events, err := readEvents(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) < 2 {
		t.Fatalf("%d chunks before the error, want the role chunk and some tokens", len(events))
	}
	words := 0
	for i, e := range events {
		var c decoded
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("chunk %d %s: %v", i, e, err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Finish != nil || c.Usage != nil {
			t.Errorf("chunk %d before the error: %s, want one choice, no finish reason, no usage", i, e)
			continue
		}
		for k, v := range c.Choices[0].Delta {
			if s, ok := v.(string); ok && k != "role" {
				words += len(strings.Fields(s))
			}
		}
	}
	if words != cutAt {
		t.Errorf("%d tokens sent before the error, want %d", words, cutAt)
	}
	eventually(t, 5*time.Second, "the slot freed", func() bool { return ts.Stats().Running == 0 })

	status, e, loose := errorBody(t, ts, map[string]any{"messages": messages})
	if status != http.StatusInternalServerError || e.Type != "InternalServerError" || e.Code != 500 ||
		!strings.HasPrefix(e.Message, "EngineCore encountered an issue.") {
		t.Errorf("non-streaming: status %d error %+v", status, e)
	}
	if p, ok := loose["param"]; !ok || p != nil {
		t.Errorf("non-streaming: param %v (present %v), want null", p, ok)
	}
	st := ts.Stats()
	if st.Faults.StreamError != 2 {
		t.Errorf("Stats().Faults.StreamError = %d, want 2", st.Faults.StreamError)
	}
	// The 500 came once the second attempt's answer had reached its
	// cut, not at once.
	generated := int64(cutAt + cfg.Faults.decide(h, 1).cutAfter(tokens))
	if st.GenerationTokens < generated {
		t.Errorf("%d tokens generated, want at least %d: the 500 came before the cut", st.GenerationTokens, generated)
	}
	if m := ts.scrape(t, `aerie_sim_faults_injected_total{kind="stream_error"}`); m != 2 {
		t.Errorf("aerie_sim_faults_injected_total{kind=\"stream_error\"} = %v, want 2", m)
	}
}

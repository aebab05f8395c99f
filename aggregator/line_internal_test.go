package aggregator

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

func encodeLine(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	if err := newEncoder(&b).Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// The shape of a completions.jsonl line of a conversation regenerated
// turn by turn with token ids, field by field and in order: the sample
// always, the turns generated, the summed usage, the effective params,
// every earlier turn with what the model returned with it, and the last
// turn's token ids at the end.
func TestCompletionLineShape(t *testing.T) {
	seed := int64(8)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r := &schema.Result{
		Run: "r", ID: "c1", Sample: 1, Turns: 2, Model: "m",
		Messages: []schema.Message{
			{Role: "user", Content: "hi"},
			{Role: "assistant", Content: "hello", Reasoning: "greet", FinishReason: "stop",
				Usage: &schema.Usage{PromptTokens: 4, CompletionTokens: 6}, PromptTokenIDs: []int{1, 2}, TokenIDs: []int{3}},
			{Role: "user", Content: "bye"},
		},
		Params:    schema.Params{MaxTokens: 64, Seed: &seed},
		Reasoning: "part", Content: "ciao", FinishReason: "stop",
		PromptTokens: 14, CompletionTokens: 16, Worker: "w", Attempts: 1, TTFTMillis: 5, LatencyMs: 9,
		FinishedAt: at, PromptTokenIDs: []int{1, 2, 3, 4}, TokenIDs: []int{5, 6},
	}
	want := `{"id":"c1","sample":1,"messages":[` +
		`{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":"hello","reasoning":"greet","finish_reason":"stop","usage":{"prompt_tokens":4,"completion_tokens":6},"prompt_token_ids":[1,2],"token_ids":[3]},` +
		`{"role":"user","content":"bye"}],` +
		`"reasoning":"part","content":"ciao","finish_reason":"stop","turns":2,` +
		`"usage":{"prompt_tokens":14,"completion_tokens":16},"model":"m","params":{"max_tokens":64,"seed":8},` +
		`"worker":"w","attempts":1,"ttft_ms":5,"latency_ms":9,"finished_at":"2026-12-01T10:00:00Z",` +
		`"prompt_token_ids":[1,2,3,4],"token_ids":[5,6]}`
	if got := encodeLine(t, dataset.NewCompletionLine(r)); got != want {
		t.Errorf("line\n got %s\nwant %s", got, want)
	}

	// A result from before turns and samples: sample 0 and one turn, both
	// written; no token ids.
	old := &schema.Result{ID: "p", Messages: []schema.Message{{Role: "user", Content: "q"}}, Content: "a", FinishReason: "stop", FinishedAt: at}
	want = `{"id":"p","sample":0,"messages":[{"role":"user","content":"q"}],"reasoning":"","content":"a","finish_reason":"stop","turns":1,` +
		`"usage":{"prompt_tokens":0,"completion_tokens":0},"model":"","params":{},"worker":"","attempts":0,"ttft_ms":0,"latency_ms":0,"finished_at":"2026-12-01T10:00:00Z"}`
	if got := encodeLine(t, dataset.NewCompletionLine(old)); got != want {
		t.Errorf("old result's line\n got %s\nwant %s", got, want)
	}
}

// The shape of a failed.jsonl line: the sample always, the failed turn
// and the prompt's own params when there are any.
func TestFailedLineShape(t *testing.T) {
	temp := 0.5
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	d := &schema.DeadLetter{ID: "c1", Sample: 2, Turn: 3, Messages: []schema.Message{{Role: "user", Content: "hi"}},
		Reason: schema.ReasonExhausted, Error: "boom", Attempts: 5, Worker: "w", FailedAt: at, Params: &schema.Params{Temperature: &temp}}
	want := `{"id":"c1","sample":2,"turn":3,"messages":[{"role":"user","content":"hi"}],"reason":"retries-exhausted","error":"boom",` +
		`"attempts":5,"worker":"w","failed_at":"2026-12-01T10:00:00Z","params":{"temperature":0.5}}`
	if got := encodeLine(t, dataset.NewFailedLine(d)); got != want {
		t.Errorf("line\n got %s\nwant %s", got, want)
	}
	d.Sample, d.Turn, d.Params = 0, 0, nil
	if got := encodeLine(t, dataset.NewFailedLine(d)); !strings.Contains(got, `"sample":0,"messages"`) || strings.Contains(got, "params") {
		t.Errorf("sample 0 without turn or params: %s", got)
	}
}

// The requests a line took, as the throughput estimate counts them.
func TestAnswerOfLine(t *testing.T) {
	gen := func(tokens int) schema.Message {
		return schema.Message{Role: "assistant", Content: "a", FinishReason: "stop", Usage: &schema.Usage{CompletionTokens: tokens}}
	}
	user := schema.Message{Role: "user", Content: "q"}
	input := schema.Message{Role: "assistant", Content: "the input's answer"}
	cases := []struct {
		name     string
		r        schema.Result
		turnsAll bool
		want     throughput.Answer
	}{
		{"turns last", schema.Result{Messages: []schema.Message{user, input, user}, CompletionTokens: 70, FinishReason: "stop"}, false,
			throughput.Single(70, false)},
		{"turns last, cut", schema.Result{Messages: []schema.Message{user}, CompletionTokens: 70, FinishReason: "length", Truncated: true}, false,
			throughput.Single(70, true)},
		{"three turns", schema.Result{Messages: []schema.Message{user, gen(10), user, gen(20), user}, Turns: 3, CompletionTokens: 100, FinishReason: "stop"}, true,
			throughput.Answer{Requests: []throughput.Request{{CompletionTokens: 10}, {CompletionTokens: 20}, {CompletionTokens: 70}}}},
		{"second of four turns cut and kept", schema.Result{Messages: []schema.Message{user, gen(10), user, input, user, input, user}, Turns: 2,
			CompletionTokens: 50, FinishReason: "length", Truncated: true}, true,
			throughput.Answer{Requests: []throughput.Request{{CompletionTokens: 10}, {CompletionTokens: 40, Truncated: true}}, Skipped: 2}},
		{"second of four cut and kept, the context holding only two", schema.Result{Messages: []schema.Message{user, gen(10), user}, Turns: 2, TurnsPlanned: 4,
			CompletionTokens: 50, FinishReason: "length", Truncated: true}, true,
			throughput.Answer{Requests: []throughput.Request{{CompletionTokens: 10}, {CompletionTokens: 40, Truncated: true}}, Skipped: 2}},
		{"one turn", schema.Result{Messages: []schema.Message{user}, CompletionTokens: 30, FinishReason: "stop"}, true,
			throughput.Single(30, false)},
	}
	for _, c := range cases {
		s := resultSummary(&c.r)
		if got := answerOf(&s, c.turnsAll); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	conv := turnHeads([]schema.Message{user, input, user, input, user})
	if n := failedRequests(conv, true); n != 3 {
		t.Errorf("a failed three-turn conversation accounts for %d requests, want 3", n)
	}
	if n := failedRequests(conv, false); n != 1 {
		t.Errorf("a failed prompt with --turns last accounts for %d requests, want 1", n)
	}
}

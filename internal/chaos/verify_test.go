package chaos

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// The check finds every way the output can break the promise: an id
// twice in one file, in both files, in neither, not in the input, and
// lines that are not output lines.
func TestVerify(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	completions := write("completions.jsonl", `{"id":"a","finish_reason":"stop"}
{"id":"b","finish_reason":"length","truncated":true}
{"id":"a","finish_reason":"stop"}
{"id":"c","finish_reason":"stop"}
not json
{"content":"no id"}
{"id":"zz","finish_reason":"stop"}
{"id":"d","fin`)
	failed := write("failed.jsonl", `{"id":"c","reason":"permanent"}
{"id":"e","reason":"retries-exhausted"}
`)
	o, err := verify(prompts("a", "b", "c", "d", "e", "f"), false, completions, failed)
	if err != nil {
		t.Fatal(err)
	}
	if o.Prompts != 6 || o.Completed != 4 || o.Failed != 2 || o.Truncated != 1 {
		t.Errorf("prompts %d, completed %d, failed %d, truncated %d; want 6, 4, 2, 1", o.Prompts, o.Completed, o.Failed, o.Truncated)
	}
	for _, c := range []struct {
		name      string
		got, want []string
	}{
		{"duplicates", o.Duplicates, []string{"a (2 times in completions.jsonl)"}},
		{"in both", o.InBoth, []string{"c"}},
		{"missing", o.Missing, []string{"d", "f"}},
		{"unknown", o.Unknown, []string{"zz"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if len(o.Unparseable) != 3 {
		t.Errorf("unparseable = %q, want the line that is not JSON, the one without id and the torn last line", o.Unparseable)
	}
	if o.FailedByReason["permanent"] != 1 || o.FailedByReason["retries-exhausted"] != 1 {
		t.Errorf("failed by reason = %v", o.FailedByReason)
	}
	if o.OK() {
		t.Error("OK() with every kind of problem")
	}

	clean, err := verify(prompts("a", "e"), false, write("c2.jsonl", `{"id":"a"}`+"\n"), write("f2.jsonl", `{"id":"e","reason":"permanent"}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !clean.OK() {
		t.Errorf("a clean output is not OK: %+v", clean)
	}
}

// prompts makes single-turn input prompts with these ids.
func prompts(ids ...string) []inputPrompt {
	out := make([]inputPrompt, len(ids))
	for i, id := range ids {
		out[i] = inputPrompt{ID: id, Messages: []schema.Message{{Role: "user", Content: "q " + id}}}
	}
	return out
}

// With --turns all the check reads every line's turns against the input
// conversation: their number, the input's own messages in order, and a
// generated answer with its finish reason and usage in place of each
// assistant message of the input.
func TestVerifyTurns(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	input := `{"id":"one","messages":[{"role":"user","content":"u1"}]}
{"id":"two","messages":[{"role":"system","content":"s"},{"role":"user","content":"u1"},{"role":"assistant","content":"old a1"},{"role":"user","content":"u2"},{"role":"assistant","content":"final, dropped"}]}
{"id":"three","conversations":[{"from":"human","value":"u1"},{"from":"gpt","value":"old a1"},{"from":"human","value":"u2"},{"from":"gpt","value":"old a2"},{"from":"human","value":"u3"}]}
`
	if err := os.WriteFile(prompts, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := readInput(prompts, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 3 || schema.TurnSlots(in[1].Messages) != 2 || schema.TurnSlots(in[2].Messages) != 3 || in[2].Messages[1].Content != "old a1" {
		t.Fatalf("input read as %+v", in)
	}
	gen := func(text string) string {
		return `{"role":"assistant","content":"` + text + `","finish_reason":"stop","usage":{"prompt_tokens":5,"completion_tokens":7}}`
	}
	last := `"finish_reason":"stop","usage":{"prompt_tokens":9,"completion_tokens":20}`
	good := map[string]string{
		"one":   `{"id":"one","messages":[{"role":"user","content":"u1"}],"turns":1,` + last + `}`,
		"two":   `{"id":"two","messages":[{"role":"system","content":"s"},{"role":"user","content":"u1"},` + gen("new a1") + `,{"role":"user","content":"u2"}],"turns":2,` + last + `}`,
		"three": `{"id":"three","messages":[{"role":"user","content":"u1"},` + gen("new a1") + `,{"role":"user","content":"u2"},` + gen("new a2") + `,{"role":"user","content":"u3"}],"turns":3,` + last + `}`,
	}
	cases := []struct {
		name, three, failed, want string
	}{
		{"clean", good["three"], "", ""},
		{"a turn short", `{"id":"three","messages":[{"role":"user","content":"u1"},` + gen("new a1") + `,{"role":"user","content":"u2"}],"turns":2,` + last + `}`,
			"", "three: turns 2 of 3, and the last one was not cut at max_tokens"},
		{"cut short and said so", `{"id":"three","messages":[{"role":"user","content":"u1"},` + gen("new a1") + `,{"role":"user","content":"u2"}],"turns":2,"turns_planned":3,"truncated":true,"finish_reason":"length","usage":{"prompt_tokens":9,"completion_tokens":900}}`,
			"", ""},
		{"cut short without turns_planned", `{"id":"three","messages":[{"role":"user","content":"u1"},` + gen("new a1") + `,{"role":"user","content":"u2"}],"turns":2,"truncated":true,"finish_reason":"length","usage":{"prompt_tokens":9,"completion_tokens":900}}`,
			"", "three: cut at max_tokens at turn 2 of 3, but turns_planned is 0"},
		{"the input's text", `{"id":"three","messages":[{"role":"user","content":"u1"},` + gen("new a1") + `,{"role":"user","content":"u2"},` + gen("old a2") + `,{"role":"user","content":"u3"}],"turns":3,` + last + `}`,
			"", "three: turn 2 (message 4) is the input's assistant text"},
		{"no usage", `{"id":"three","messages":[{"role":"user","content":"u1"},{"role":"assistant","content":"new a1","finish_reason":"stop"},{"role":"user","content":"u2"},` + gen("new a2") + `,{"role":"user","content":"u3"}],"turns":3,` + last + `}`,
			"", "three: turn 1 (message 2) has no usage"},
		{"no finish reason", `{"id":"three","messages":[{"role":"user","content":"u1"},{"role":"assistant","content":"new a1","usage":{"prompt_tokens":1,"completion_tokens":3}},{"role":"user","content":"u2"},` + gen("new a2") + `,{"role":"user","content":"u3"}],"turns":3,` + last + `}`,
			"", "three: turn 1 (message 2) has no finish_reason"},
		{"a user message changed", `{"id":"three","messages":[{"role":"user","content":"u1"},` + gen("new a1") + `,{"role":"user","content":"u2!"},` + gen("new a2") + `,{"role":"user","content":"u3"}],"turns":3,` + last + `}`,
			"", "three: message 3 (user) is not the input's"},
		{"a message missing", `{"id":"three","messages":[{"role":"user","content":"u1"},` + gen("new a1") + `,` + gen("new a2") + `,{"role":"user","content":"u3"}],"turns":3,` + last + `}`,
			"", "three: 4 messages for turn 3, want 5"},
		{"the last turn without finish reason", `{"id":"three","messages":[{"role":"user","content":"u1"},` + gen("new a1") + `,{"role":"user","content":"u2"},` + gen("new a2") + `,{"role":"user","content":"u3"}],"turns":3,"usage":{"prompt_tokens":9,"completion_tokens":20}}`,
			"", "three: the last turn has no finish_reason"},
		{"failed at a turn it does not have", "", `{"id":"three","reason":"permanent","turn":4}`,
			"three: failed at turn 4 of a conversation of 3 turns"},
		{"failed at its second turn", "", `{"id":"three","reason":"permanent","turn":2}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			completions := good["one"] + "\n" + good["two"] + "\n"
			if c.three != "" {
				completions += c.three + "\n"
			}
			failed := ""
			if c.failed != "" {
				failed = c.failed + "\n"
			}
			cp, fp := filepath.Join(t.TempDir(), "c.jsonl"), filepath.Join(t.TempDir(), "f.jsonl")
			if err := os.WriteFile(cp, []byte(completions), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(fp, []byte(failed), 0o644); err != nil {
				t.Fatal(err)
			}
			o, err := verify(in, true, cp, fp)
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if len(o.BadTurns) > 0 || !o.OK() {
					t.Errorf("bad turns %q, outcome %+v", o.BadTurns, o)
				}
			} else if len(o.BadTurns) != 1 || !strings.HasPrefix(o.BadTurns[0], c.want) {
				t.Errorf("bad turns %q, want one starting %q", o.BadTurns, c.want)
			}
			if o.Conversations != 3 || o.TurnsPlanned != 6 {
				t.Errorf("%d conversations of %d turns, want 3 of 6", o.Conversations, o.TurnsPlanned)
			}
		})
	}
}

// A request that begins a delivery's work on a conversation must not ask
// for a turn stored, or a conversation answered, before it; a request
// that goes on after the turn before it, by the same worker, may (two
// deliveries of one conversation can run at once).
func TestCheckRequests(t *testing.T) {
	in := []inputPrompt{
		{ID: "a", Messages: []schema.Message{{Role: "user", Content: "a1"}, {Role: "assistant", Content: "x"}, {Role: "user", Content: "a2"}, {Role: "assistant", Content: "y"}, {Role: "user", Content: "a3"}}},
		{ID: "b", Messages: []schema.Message{{Role: "user", Content: "b1"}}},
		// c and d share their first turn: requests for it are untraceable.
		{ID: "c", Messages: []schema.Message{{Role: "user", Content: "same"}, {Role: "assistant", Content: "x"}, {Role: "user", Content: "c2"}}},
		{ID: "d", Messages: []schema.Message{{Role: "user", Content: "same"}, {Role: "assistant", Content: "x"}, {Role: "user", Content: "d2"}}},
	}
	idx := newRequestIndex(in, true)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	req := func(worker string, s float64, msgs ...string) backendRequest {
		var m []schema.Message
		for i, c := range msgs {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			m = append(m, schema.Message{Role: role, Content: c})
		}
		key, assistants := contextKey(m)
		return backendRequest{worker: worker, at: at(s), key: key, assistants: assistants}
	}
	turnStored := map[turnRef]time.Time{{id: "a", turn: 0}: at(10), {id: "a", turn: 1}: at(20)}
	resultStored := map[string]time.Time{"a": at(30), "b": at(5)}
	reqs := []backendRequest{
		req("w1", 1, "a1"),                            // start, nothing stored yet
		req("w1", 11, "a1", "gen", "a2"),              // goes on after turn 1
		req("w2", 12, "a1", "gen", "a2"),              // starts at turn 2: fine, turn 2 not stored
		req("w3", 14, "a1"),                           // starts at turn 1, stored 4 s before: regenerated
		req("w1", 21, "a1", "gen", "a2", "gen", "a3"), // goes on
		req("w2", 22, "a1", "gen", "a2", "gen", "a3"), // goes on beside w1: not judged
		req("w4", 22.5, "a1", "gen", "a2"),            // starts at turn 2, stored 2.5 s before: within the slack
		req("w5", 40, "a1", "gen", "a2", "gen", "a3"), // starts at turn 3 after the answer: regenerated
		req("w1", 4, "b1"),                            // start, before the answer
		req("w6", 9, "b1"),                            // after the answer: regenerated
		req("w1", 2, "same"),                          // c or d: not traced
		req("w1", 3, "same", "gen", "c2"),             // c turn 2: traced
	}
	c := checkRequests(reqs, len(reqs)+1, idx, turnStored, resultStored)
	if c.Chat != 13 || c.Traced != 11 {
		t.Errorf("chat %d, traced %d; want 13, 11", c.Chat, c.Traced)
	}
	want := []string{"a turn 1: stored at 10:00:10.000, asked for again by w3 at 10:00:14.000",
		"a turn 3: answered at 10:00:30.000, asked for again by w5 at 10:00:40.000",
		"b turn 1: answered at 10:00:05.000, asked for again by w6 at 10:00:09.000"}
	if !slices.Equal(c.Regenerated, want) {
		t.Errorf("regenerated:\n%s\nwant:\n%s", strings.Join(c.Regenerated, "\n"), strings.Join(want, "\n"))
	}
	if c.Starts != 8 {
		t.Errorf("starts %d, want 8 (w1 a, w2 a, w3 a, w4 a, w5 a, w1 b, w6 b, w1 c)", c.Starts)
	}
	if c.Repeated != 6 {
		t.Errorf("repeated %d, want 6", c.Repeated)
	}

	// With --turns last a request is the prompt as given, the input's
	// assistant turns included.
	single := newRequestIndex([]inputPrompt{in[0]}, false)
	again := []backendRequest{req("w1", 25, "a1", "x", "a2", "y", "a3"), req("w2", 40, "a1", "x", "a2", "y", "a3")}
	c = checkRequests(again, 2, single, nil, resultStored)
	if c.Traced != 2 || len(c.Regenerated) != 1 || !strings.HasPrefix(c.Regenerated[0], "a turn 1: answered at 10:00:30.000, asked for again by w2") {
		t.Errorf("single-turn: traced %d, regenerated %q; want 2 and w2's", c.Traced, c.Regenerated)
	}
}

// The line counter reads only what was appended and starts again when
// the file shrinks, as when the aggregator cuts a torn last line.
func TestLineCounter(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	c := newLineCounter(p)
	if n := c.count(); n != 0 {
		t.Fatalf("missing file: %d lines", n)
	}
	steps := []struct {
		body string
		want int
	}{
		{"a\nb\nc", 2},
		{"a\nb\nc\nd\n", 4},
		{"a\nb\n", 2},
		{"a\nb\nx\ny\nz\n", 5},
	}
	for _, s := range steps {
		if err := os.WriteFile(p, []byte(s.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if n := c.count(); n != s.want {
			t.Errorf("after writing %q: %d lines, want %d", s.body, n, s.want)
		}
	}
}

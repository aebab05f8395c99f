package dataset

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

func ptr[T any](v T) *T { return &v }

// A line's params are read on every shape, canonical and validated; an
// empty or null params object is no params.
func TestParseLineParams(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       *schema.Params
	}{
		{"absent", `{"id":"a","prompt":"q"}`, nil},
		{"null", `{"id":"a","prompt":"q","params":null}`, nil},
		{"empty", `{"id":"a","prompt":"q","params":{}}`, nil},
		{"only nulls", `{"id":"a","prompt":"q","params":{"top_k":null}}`, nil},
		{"n of one", `{"id":"a","prompt":"q","params":{"n":1}}`, nil},
		{"prompt shape", `{"id":"a","prompt":"q","params":{"temperature":0.2,"top_k":20,"seed":7}}`,
			&schema.Params{Temperature: ptr(0.2), TopK: ptr(20), Seed: ptr(int64(7))}},
		{"messages shape", `{"id":"a","messages":[{"role":"user","content":"q"}],"params":{"stop":"END","max_tokens":100}}`,
			&schema.Params{Stop: []string{"END"}, MaxTokens: 100}},
		{"conversations shape", `{"id":"a","conversations":[{"from":"human","value":"q"}],"params":{"min_p":0.05,"reasoning_effort":"high"}}`,
			&schema.Params{MinP: ptr(0.05), ReasoningEffort: "high"}},
		{"objects canonical", `{"id":"a","prompt":"q","params":{"chat_template_kwargs":{ "b" : 1, "a" : {"y":2,"x":1} },"vendor_knob":[1, 2]}}`,
			&schema.Params{ChatTemplateKwargs: json.RawMessage(`{"a":{"x":1,"y":2},"b":1}`), ExtraBody: json.RawMessage(`{"vendor_knob":[1,2]}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ParseLineWith([]byte(tc.line), ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !paramsEqual(l.Params, tc.want) {
				t.Fatalf("params %s, want %s", paramsText(l.Params), paramsText(tc.want))
			}
			if _, _, err := ParseLine([]byte(tc.line)); err != nil {
				t.Fatalf("ParseLine: %v", err)
			}
			checkSamePaths(t, []byte(tc.line))
		})
	}
}

func paramsEqual(a, b *schema.Params) bool {
	return paramsText(a) == paramsText(b)
}

func paramsText(p *schema.Params) string {
	if p == nil {
		return "nil"
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "unencodable: " + err.Error()
	}
	return string(b)
}

// A wrong params makes the line invalid, for ParseLine too, saying what
// is wrong.
func TestParseLineParamsErrors(t *testing.T) {
	for _, tc := range []struct{ name, params, reason string }{
		{"not an object", `"hot"`, "params must be a JSON object of request parameters"},
		{"a list", `[1]`, "params must be a JSON object"},
		{"top_k not an integer", `{"top_k":2.5}`, "params.top_k: expected an integer"},
		{"top_k a string", `{"top_k":"20"}`, "params.top_k: expected an integer, found a JSON string"},
		{"temperature a string", `{"temperature":"hot"}`, "params.temperature: expected a number"},
		{"stop a number", `{"stop":5}`, "params.stop"},
		{"top_p out of range", `{"top_p":1.5}`, "top_p is 1.5"},
		{"reserved model", `{"model":"x"}`, `params sets "model"`},
		{"several answers", `{"n":3}`, "use --samples"},
		{"kwargs not an object", `{"chat_template_kwargs":[true]}`, "params.chat_template_kwargs: must be a JSON object"},
		{"bad effort", `{"reasoning_effort":"max"}`, `reasoning_effort is "max"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, shape := range []string{
				`{"id":"a","prompt":"q","params":%s}`,
				`{"id":"a","params":%s,"messages":[{"role":"user","content":"q"}]}`,
				`{"conversations":[{"from":"human","value":"q"}],"params":%s}`,
			} {
				line := []byte(fmt.Sprintf(shape, tc.params))
				_, _, err := ParseLine(line)
				if err == nil || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("%s: error %v, want %q", line, err, tc.reason)
				}
				checkSamePaths(t, line)
			}
		})
	}
}

// Ids with a NUL byte are refused: schema.Unit.Key separates the id from
// the sample with one.
func TestParseLineRefusesNUL(t *testing.T) {
	_, _, err := ParseLine([]byte(`{"id":"a\u0000b","prompt":"q"}`))
	if err == nil || !strings.Contains(err.Error(), "id contains a NUL byte") {
		t.Fatalf("error %v, want one about the NUL byte", err)
	}
}

// With --turns all every assistant turn is a placeholder to regenerate:
// kept, its text dropped; the final one is dropped as with --turns last.
func TestParseLineTurnsAll(t *testing.T) {
	ph := schema.Message{Role: "assistant"}
	for _, tc := range []struct {
		name, line string
		msgs       []schema.Message
	}{
		{"single turn", `{"id":"a","messages":[{"role":"user","content":"q"}]}`, []schema.Message{user("q")}},
		{"final answer dropped", `{"id":"a","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"old"}]}`, []schema.Message{user("q")}},
		{"three turns", `{"id":"a","messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"},{"role":"assistant","content":"a2"},{"role":"user","content":"q3"},{"role":"assistant","content":"a3"}]}`,
			[]schema.Message{system("s"), user("q1"), ph, user("q2"), ph, user("q3")}},
		{"placeholders not read", `{"id":"a","messages":[{"role":"user","content":"q1"},{"role":"assistant","content":null},{"role":"user","content":"q2"},{"role":"assistant"},{"role":"user","content":"q3"}]}`,
			[]schema.Message{user("q1"), ph, user("q2"), ph, user("q3")}},
		{"sharegpt", `{"id":"a","conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"a1"},{"from":"human","value":"q2"},{"from":"gpt","value":"a2"}]}`,
			[]schema.Message{user("q1"), ph, user("q2")}},
		{"two user turns in a row", `{"id":"a","messages":[{"role":"user","content":"q1"},{"role":"user","content":"q2"},{"role":"assistant","content":"a"},{"role":"user","content":"q3"}]}`,
			[]schema.Message{user("q1"), user("q2"), ph, user("q3")}},
		{"prompt", `{"id":"a","prompt":"q"}`, []schema.Message{user("q")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ParseLineWith([]byte(tc.line), ParseOptions{Turns: schema.TurnsAll})
			if err != nil {
				t.Fatal(err)
			}
			if l.ID != "a" || !sameMessages(l.Messages, tc.msgs) {
				t.Fatalf("got %q %+v, want %+v", l.ID, l.Messages, tc.msgs)
			}
			if got, want := schema.TurnSlots(l.Messages), strings.Count(tc.line, `"assistant"`)+strings.Count(tc.line, `"gpt"`); got != max(want, 1) && got != want+1 {
				t.Fatalf("%d turns for %d assistant turns in the input", got, want)
			}
			checkSamePaths(t, []byte(tc.line))
		})
	}
	// Without an id, the id is derived from what is queued: the input's
	// assistant texts do not count.
	a, err := ParseLineWith([]byte(`{"messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"x"},{"role":"user","content":"q2"}]}`), ParseOptions{Turns: schema.TurnsAll})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseLineWith([]byte(`{"messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"y"},{"role":"user","content":"q2"}]}`), ParseOptions{Turns: schema.TurnsAll})
	if err != nil || !a.Derived || a.ID != b.ID || a.ID != ContentID(a.Messages) {
		t.Fatalf("derived ids %+v, %+v, %v", a, b, err)
	}
}

func TestParseLineTurnsAllErrors(t *testing.T) {
	for _, tc := range []struct{ name, line, reason string }{
		{"assistant after system", `{"messages":[{"role":"system","content":"s"},{"role":"assistant","content":"a"},{"role":"user","content":"q"}]}`,
			"message 2: an assistant turn must follow a user message to be regenerated with --turns all"},
		{"assistant first", `{"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"q"}]}`,
			"message 1: an assistant turn must follow a user message"},
		{"two assistants in a row", `{"messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"q2"}]}`,
			"message 3: an assistant turn must follow a user message"},
		{"ends with two assistants", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"assistant","content":"b"}]}`,
			"message 2: the conversation must end with a user message"},
		{"ends with system", `{"messages":[{"role":"user","content":"q"},{"role":"system","content":"s"}]}`, "must end with a user message"},
		{"no user", `{"messages":[{"role":"system","content":"s"},{"role":"assistant","content":"a"}]}`, "no user message left after dropping the final assistant answer"},
		{"only system", `{"messages":[{"role":"system","content":"s"}]}`, "no user message"},
		{"empty user content", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":""}]}`, "message 3: empty content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseLineWith([]byte(tc.line), ParseOptions{Turns: schema.TurnsAll})
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error %v, want %q", err, tc.reason)
			}
			checkSamePaths(t, []byte(tc.line))
		})
	}
	// With --turns last the same earlier turns are sent as given.
	l, err := ParseLineWith([]byte(`{"messages":[{"role":"system","content":"s"},{"role":"assistant","content":"a"},{"role":"user","content":"q"}]}`), ParseOptions{Turns: schema.TurnsLast})
	if err != nil || !sameMessages(l.Messages, []schema.Message{system("s"), assistant("a"), user("q")}) {
		t.Fatalf("turns last: %+v, %v", l, err)
	}
	if _, err := ParseLineWith([]byte(`{"prompt":"q"}`), ParseOptions{Turns: "some"}); err == nil || !strings.Contains(err.Error(), `turns "some"`) {
		t.Fatalf("unknown mode: %v", err)
	}
}

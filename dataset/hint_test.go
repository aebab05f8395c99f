package dataset_test

import (
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// A line's length hint is its length_hint, or else the size of the
// dataset's own answer to the turn to be generated, at four bytes a
// token: the final assistant turn, and with --turns all every assistant
// turn. A bad length_hint makes the line invalid, saying why.
func TestLengthHint(t *testing.T) {
	answer := strings.Repeat("x", 400) // 100 tokens
	for _, c := range []struct {
		name, line string
		turns      string
		want       int
		err        string
	}{
		{"none", `{"prompt": "q"}`, "", 0, ""},
		{"given", `{"prompt": "q", "length_hint": 250}`, "", 250, ""},
		{"given wins over the answer", `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "` + answer + `"}], "length_hint": 7}`, "", 7, ""},
		{"the dropped answer", `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "` + answer + `"}]}`, "", 100, ""},
		{"sharegpt", `{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "` + answer + `"}]}`, "", 100, ""},
		{"last turn only", `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "` + answer + `"}, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "` + answer + answer + `"}]}`, "", 200, ""},
		{"every turn with --turns all", `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "` + answer + `"}, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "` + answer + answer + `"}]}`, schema.TurnsAll, 300, ""},
		{"an empty answer", `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null}]}`, "", 0, ""},
		{"batch", `{"custom_id": "b", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "q"}]}, "length_hint": 42}`, "", 42, ""},
		{"negative", `{"prompt": "q", "length_hint": -1}`, "", 0, "want a whole number of tokens from 0 to"},
		{"fraction", `{"prompt": "q", "length_hint": 2.5}`, "", 0, "want a whole number"},
		{"too large", `{"prompt": "q", "length_hint": 1e9}`, "", 0, "want a whole number"},
		{"string", `{"prompt": "q", "length_hint": "300"}`, "", 0, "length_hint must be a number of tokens, found string"},
	} {
		l, err := dataset.ParseLineWith([]byte(c.line), dataset.ParseOptions{Turns: c.turns})
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && l.LengthHint != c.want:
			t.Errorf("%s: hint %d, want %d", c.name, l.LengthHint, c.want)
		}
	}
}

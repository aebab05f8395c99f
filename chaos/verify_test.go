package chaos

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
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
	o, err := verify([]string{"a", "b", "c", "d", "e", "f"}, completions, failed)
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

	clean, err := verify([]string{"a", "e"}, write("c2.jsonl", `{"id":"a"}`+"\n"), write("f2.jsonl", `{"id":"e","reason":"permanent"}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !clean.OK() {
		t.Errorf("a clean output is not OK: %+v", clean)
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

package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

func TestExecutable(t *testing.T) {
	for cmdline, want := range map[string]string{
		"/usr/local/bin/aerie work --run %i": "/usr/local/bin/aerie",
		"-/usr/bin/true":                     "/usr/bin/true",
		"!!@/bin/sh argv0 -c x":              "/bin/sh",
		"aerie work":                         "aerie",
		`"/opt/my app/bin/x" --flag`:         "/opt/my app/bin/x",
		"  /bin/kill\t-s HUP $MAINPID":       "/bin/kill",
		"":                                   "",
		"-":                                  "",
	} {
		if got := executable(cmdline); got != want {
			t.Errorf("executable(%q) = %q, want %q", cmdline, got, want)
		}
	}
}

func TestEstimateTokens(t *testing.T) {
	for _, c := range []struct {
		texts []string
		want  int
	}{
		{nil, 0},
		{[]string{"a"}, 1},
		{[]string{"abcd"}, 1},
		{[]string{"abcde"}, 2},
		{[]string{"abcd", "abcd", "a"}, 3},
	} {
		var msgs []schema.Message
		for _, s := range c.texts {
			msgs = append(msgs, schema.Message{Role: "user", Content: s})
		}
		if got := estimateTokens(msgs); got != c.want {
			t.Errorf("estimateTokens(%q) = %d, want %d", c.texts, got, c.want)
		}
	}
}

// The prompts file is read in the run's turns mode: with --turns all an
// earlier assistant turn is a placeholder whose text is neither required
// nor counted.
func TestScanPromptsTurnsAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.jsonl")
	lines := `{"id":"a","messages":[{"role":"user","content":"q1"},{"role":"assistant","content":null},{"role":"user","content":"q2"}]}
{"id":"b","messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"` + strings.Repeat("x", 400) + `"},{"role":"user","content":"q2"}]}
`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	last := scanPrompts(context.Background(), path, 50, dataset.ParseOptions{})
	if last.prompts != 1 || last.invalid != 1 || last.over != 1 {
		t.Errorf("turns last: %+v", last)
	}
	all := scanPrompts(context.Background(), path, 50, dataset.ParseOptions{Turns: schema.TurnsAll})
	if all.prompts != 2 || all.invalid != 0 || all.over != 0 {
		t.Errorf("turns all: %+v", all)
	}
}

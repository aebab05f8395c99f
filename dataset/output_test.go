package dataset_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/dataset"
)

// The readers stream every line in order, name a bad line by FILE:LINE,
// leave out a torn last line, and hand back the caller's own error.
func TestReadLines(t *testing.T) {
	in := `{"id":"a","sample":0,"messages":[{"role":"user","content":"q"}],"content":"x","finish_reason":"stop"}` + "\n" +
		"\n" +
		`{"id":"a","sample":1,"content":"y","finish_reason":"length","truncated":true}` + "\n" +
		`{"id":"b","sam`
	var got []string
	err := dataset.ReadCompletions(strings.NewReader(in), "c.jsonl", func(l *dataset.CompletionLine) error {
		got = append(got, l.Unit().Key()+"="+l.Content)
		return nil
	})
	if err != nil || len(got) != 2 || got[0] != "a=x" || got[1] != "a\x001=y" {
		t.Fatalf("read %q, %v", got, err)
	}

	err = dataset.ReadCompletions(strings.NewReader(in[:10]+"\n"), "c.jsonl", func(*dataset.CompletionLine) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "c.jsonl:1") {
		t.Errorf("bad line: %v", err)
	}
	err = dataset.ReadFailed(strings.NewReader(`{"sample":0}`+"\n"), "f.jsonl", func(*dataset.FailedLine) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "f.jsonl:1") || !strings.Contains(err.Error(), "no id") {
		t.Errorf("line without id: %v", err)
	}
	err = dataset.ReadCompletions(strings.NewReader(`{"id":"a","sample":-1,"content":"x"}`+"\n"), "c.jsonl", func(*dataset.CompletionLine) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "c.jsonl:1") || !strings.Contains(err.Error(), "sample") {
		t.Errorf("negative sample: %v", err)
	}
	stop := errors.New("stop")
	err = dataset.ReadFailed(strings.NewReader(`{"id":"f","reason":"permanent"}`+"\n"), "f.jsonl", func(*dataset.FailedLine) error { return stop })
	if err != stop {
		t.Errorf("the caller's error came back as %v", err)
	}
}

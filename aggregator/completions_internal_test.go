package aggregator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// resultOf is the i-th result of a run of conversations of varied shape.
func resultOf(i int) *schema.Result {
	r := &schema.Result{
		ID: fmt.Sprintf("p%04d", i/2), Sample: i % 2, Content: strings.Repeat("a", i%50), FinishReason: "stop",
		Turns: 1 + i%3, PromptTokens: i, CompletionTokens: 100 + i, LengthHint: i % 7, Worker: fmt.Sprintf("w%d", i%3),
		FinishedAt: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC),
	}
	r.Messages = []schema.Message{{Role: "user", Content: "q"}}
	for k := 1; k < r.Turns; k++ {
		r.Messages = append(r.Messages, schema.Message{Role: "assistant", Content: "r", Usage: &schema.Usage{CompletionTokens: 10 * k}},
			schema.Message{Role: "user", Content: "q"})
	}
	if i%5 == 0 {
		r.FinishReason, r.Truncated = "length", true
	}
	return r
}

// appendResults appends the lines of results from to to as the aggregator
// does, in batches of 7.
func appendResults(t *testing.T, j *jsonlFile, from, to int) {
	t.Helper()
	for b := from; b < to; b += 7 {
		var buf bytes.Buffer
		var keys []string
		var sums []lineindex.Summary
		for i := b; i < min(b+7, to); i++ {
			line := dataset.NewCompletionLine(resultOf(i))
			if err := json.NewEncoder(&buf).Encode(&line); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, schema.Unit{ID: line.ID, Sample: line.Sample}.Key())
			sums = append(sums, lineindex.Summarize(&line))
		}
		if err := j.appendLines(&buf, keys, sums); err != nil {
			t.Fatal(err)
		}
	}
}

// reopen opens path as a restarted aggregator does and returns the file,
// the answers it restored in order, and what it logged.
func reopen(t *testing.T, path string) (*jsonlFile, []throughput.Answer, string) {
	t.Helper()
	var logs logtest.Buffer
	var answers []throughput.Answer
	j, err := openCompletions(path, 0, func(s *lineindex.Summary) {
		answers = append(answers, answerOf(s, true))
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, answers, logs.String()
}

func writeCompletions(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), CompletionsFile)
	j, _, _ := reopen(t, path)
	appendResults(t, j, 0, n)
	j.Close()
	return path
}

func TestCompletionsReopenFromTheirIndex(t *testing.T) {
	const n = 200
	path := writeCompletions(t, n)
	j, fromIndex, logs := reopen(t, path)
	if j.read != 0 || j.count() != n || len(fromIndex) != n {
		t.Fatalf("read %d lines whole of %d, restored %d; want 0 of %d\n%s", j.read, j.count(), len(fromIndex), n, logs)
	}
	for i := range n {
		if seen, err := j.has(resultOf(i).Unit().Key()); err != nil || !seen {
			t.Fatalf("line %d not indexed (%v)", i+1, err)
		}
	}
	j.Close()
	// The same answers as read from the lines themselves.
	if err := os.Remove(lineindex.PathOf(path)); err != nil {
		t.Fatal(err)
	}
	j, fromLines, logs := reopen(t, path)
	if j.read != n || !reflect.DeepEqual(fromIndex, fromLines) {
		t.Fatalf("read %d whole; the index restored\n%v\nthe lines\n%v", j.read, fromIndex, fromLines)
	}
	if strings.Contains(logs, "disagrees") {
		t.Errorf("a missing index is not a disagreement:\n%s", logs)
	}
	j.Close()
	// ... and indexed them anew.
	if j, _, _ := reopen(t, path); j.read != 0 {
		t.Errorf("read %d lines whole after the index was written anew", j.read)
	}
}

// Lines written and fsynced whose index frame was lost in a crash are
// read whole, and indexed.
func TestCompletionsAfterTheirIndex(t *testing.T) {
	path := writeCompletions(t, 30)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 30; i < 40; i++ {
		line := dataset.NewCompletionLine(resultOf(i))
		if err := json.NewEncoder(f).Encode(&line); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	j, answers, logs := reopen(t, path)
	if j.read != 10 || len(answers) != 40 || strings.Contains(logs, "disagrees") {
		t.Fatalf("read %d whole, restored %d:\n%s", j.read, len(answers), logs)
	}
	appendResults(t, j, 40, 45)
	j.Close()
	if j, answers, _ := reopen(t, path); j.read != 0 || len(answers) != 45 {
		t.Fatalf("then read %d whole, restored %d", j.read, len(answers))
	}
}

// A torn last line after the indexed ones is cut, and the index says so:
// the next start trusts it.
func TestCompletionsTornAfterTheirIndex(t *testing.T) {
	path := writeCompletions(t, 30)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":"p9999","content":"to`)
	f.Close()
	j, answers, logs := reopen(t, path)
	if j.read != 0 || len(answers) != 30 {
		t.Fatalf("read %d whole, restored %d:\n%s", j.read, len(answers), logs)
	}
	j.Close()
	j, _, logs = reopen(t, path)
	if j.read != 0 || strings.Contains(logs, "disagrees") {
		t.Fatalf("after the cut: read %d whole:\n%s", j.read, logs)
	}
}

// A file changed behind its index is read whole, with a warning, and a
// damaged line is named by its file and number as without an index.
func TestCompletionsChangedBehindTheirIndex(t *testing.T) {
	path := writeCompletions(t, 30)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines[11] = append([]byte(`{"id":"p0005","sample":1,"content":`), bytes.Repeat([]byte("x"), len(lines[11])-36)...)
	lines[11] = append(lines[11], '\n')
	if err := os.WriteFile(path, bytes.Join(lines, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	_, err = openCompletions(path, 0, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err == nil || !strings.Contains(err.Error(), path+":12: not an aerie output line") {
		t.Fatalf("got %v, want an error naming %s:12", err, path)
	}
	if !strings.Contains(logs.String(), "line index disagrees") {
		t.Fatalf("no warning:\n%s", logs.String())
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, bytes.Join(lines, nil)) {
		t.Fatal("the file was changed")
	}
}

package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/datasettest"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/schema"
)

// BenchmarkReadCompletions reads a completions.jsonl of 10,000 answers
// of the length a reasoning model writes (about 6 KB of reasoning and 3
// KB of answer a line), as the end of a run does to build its report.
func BenchmarkReadCompletions(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	size, err := datasettest.WriteLongCompletions(filepath.Join(dir, dataset.CompletionsFile), n)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		var skipped Skipped
		c, _, err := readCompletions(dir, &skipped)
		if err != nil || c.count != n || skipped.Lines != 0 {
			b.Fatalf("read %d of %d, skipped %d: %v", c.count, n, skipped.Lines, err)
		}
	}
}

// writeIndexed writes n completions lines to dir and, when indexed, their
// line index, the way an aggregator does.
func writeIndexed(t *testing.T, dir string, n int, indexed bool) string {
	t.Helper()
	path := filepath.Join(dir, dataset.CompletionsFile)
	var data bytes.Buffer
	var sums []lineindex.Summary
	for i := range n {
		l := dataset.CompletionLine{
			ID: fmt.Sprintf("p%d", i), FinishReason: []string{"stop", "length"}[i%2], Turns: 1,
			Usage: schema.Usage{PromptTokens: i, CompletionTokens: 10 * i}, LengthHint: i % 4, Worker: fmt.Sprintf("w%d", i%3),
			TTFTMillis: int64(i), LatencyMs: int64(100 * i), FinishedAt: time.Unix(int64(1e9+i), 0).UTC(), Simulated: i%3 == 0,
		}
		b, _ := json.Marshal(&l)
		b = append(b, '\n')
		s := lineindex.Summarize(&l)
		lineindex.Place(&s, int64(data.Len()), b)
		sums = append(sums, s)
		data.Write(b)
	}
	if err := os.WriteFile(path, data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if indexed {
		w, err := lineindex.Create(lineindex.PathOf(path))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(path)
		if err := w.Append(sums[:n-5], sums[n-5].Offset, st.ModTime()); err != nil { // the last 5 not yet indexed
			t.Fatal(err)
		}
		w.Close()
	}
	return path
}

// The report is the same read through the line index as read line by
// line, and an index that disagrees with the file is said, and ignored.
func TestReadCompletionsThroughTheIndex(t *testing.T) {
	const n = 60 // few enough that the check reads back every line
	var skipped Skipped
	plain, _, err := readCompletions(filepath.Dir(writeIndexed(t, t.TempDir(), n, false)), &skipped)
	if err != nil || plain.count != n {
		t.Fatalf("read %d lines without an index: %v", plain.count, err)
	}
	path := writeIndexed(t, t.TempDir(), n, true)
	indexed, note, err := readCompletions(filepath.Dir(path), &skipped)
	if err != nil || note != "" {
		t.Fatalf("%v, %s", err, note)
	}
	if !reflect.DeepEqual(plain, indexed) {
		t.Fatalf("read line by line\n%+v\nthrough the index\n%+v", plain, indexed)
	}
	// Line 3 damaged in place, the file's time kept.
	st, _ := os.Stat(path)
	b, _ := os.ReadFile(path)
	b[bytes.Index(b, []byte(`"id":"p2"`))] = 'x'
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, st.ModTime(), st.ModTime())
	damaged, note, err := readCompletions(filepath.Dir(path), &skipped)
	if err != nil || !strings.Contains(note, "disagrees") || damaged.count != n-1 || skipped.Lines != 1 ||
		!strings.Contains(skipped.Notes[0], dataset.CompletionsFile+":3:") {
		t.Fatalf("damaged: %v, note %q, %d read, skipped %+v", err, note, damaged.count, skipped)
	}
}

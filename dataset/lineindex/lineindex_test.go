package lineindex_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/schema"
)

// lines are completions lines of every shape a summary reads: turns,
// cut turns, hints, simulated answers, a sample, a long answer.
func lines() []dataset.CompletionLine {
	at := time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC)
	return []dataset.CompletionLine{
		{ID: "a", Messages: []schema.Message{{Role: "user", Content: "q"}}, Content: "x", FinishReason: "stop", Turns: 1,
			Usage: schema.Usage{PromptTokens: 10, CompletionTokens: 20}, Worker: "w1", TTFTMillis: 30, LatencyMs: 400, FinishedAt: at},
		{ID: "a", Sample: 3, FinishReason: "length", Truncated: true, Turns: 2, TurnsPlanned: 4, LengthHint: 77, Simulated: true,
			Messages: []schema.Message{
				{Role: "user", Content: "q"},
				{Role: "assistant", Content: "r", FinishReason: "length", Usage: &schema.Usage{CompletionTokens: 9}},
				{Role: "user", Content: "q2"},
				{Role: "assistant", Content: "r2"},
			},
			Usage: schema.Usage{PromptTokens: 1, CompletionTokens: 50}, Worker: "w2", FinishedAt: at.Add(time.Second)},
		{ID: "long", Reasoning: string(bytes.Repeat([]byte("think "), 3000)), Content: "done", Turns: 1},
	}
}

// writeRun writes ls to a completions file in dir and their index, in
// frames of two lines, and returns the file's path.
func writeRun(t testing.TB, dir string, ls []dataset.CompletionLine) string {
	t.Helper()
	path := filepath.Join(dir, dataset.CompletionsFile)
	data, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	w, err := lineindex.Create(lineindex.PathOf(path))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var off int64
	var frame []lineindex.Summary
	for i := range ls {
		b, err := json.Marshal(&ls[i])
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, '\n')
		if _, err := data.Write(b); err != nil {
			t.Fatal(err)
		}
		s := lineindex.Summarize(&ls[i])
		lineindex.Place(&s, off, b)
		off += int64(len(b))
		frame = append(frame, s)
		if len(frame) == 2 || i == len(ls)-1 {
			st, err := data.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Append(frame, off, st.ModTime()); err != nil {
				t.Fatal(err)
			}
			frame = frame[:0]
		}
	}
	return path
}

func check(t *testing.T, path string) (*lineindex.Checked, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return lineindex.Check(lineindex.PathOf(path), f)
}

func TestSummariesOfWrittenAndReadLinesAgree(t *testing.T) {
	for _, l := range lines() {
		want := lineindex.Summarize(&l)
		b, err := json.Marshal(&l)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lineindex.SummarizeJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		if !got.FinishedAt.Equal(want.FinishedAt) {
			t.Errorf("%s: finished at %v, want %v", l.ID, got.FinishedAt, want.FinishedAt)
		}
		got.FinishedAt, want.FinishedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read back\n%+v\nwritten\n%+v", l.ID, got, want)
		}
	}
	for _, bad := range []string{`{"sample":1}`, `{"id":"a","usage":{"completion_tokens":"x"}}`, `{"id":"a"`} {
		if _, err := lineindex.SummarizeJSON([]byte(bad)); err == nil {
			t.Errorf("%s: summarized", bad)
		}
	}
}

func TestIndexReadsBackWhatWasWritten(t *testing.T) {
	ls := lines()
	path := writeRun(t, t.TempDir(), ls)
	c, err := check(t, path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if c.End() != st.Size() || c.Lines() != len(ls) {
		t.Fatalf("covers %d bytes and %d lines, want %d and %d", c.End(), c.Lines(), st.Size(), len(ls))
	}
	i := 0
	err = c.Each(func(s *lineindex.Summary) error {
		want := lineindex.Summarize(&ls[i])
		if s.ID != want.ID || s.Sample != want.Sample || s.CompletionTokens != want.CompletionTokens ||
			!reflect.DeepEqual(s.Assistants, want.Assistants) || s.Worker != want.Worker ||
			s.Simulated != want.Simulated || s.Truncated != want.Truncated || !s.FinishedAt.Equal(want.FinishedAt) ||
			s.TurnsPlanned != want.TurnsPlanned || s.LengthHint != want.LengthHint || s.LatencyMs != want.LatencyMs {
			t.Errorf("line %d: %+v, want %+v", i+1, *s, want)
		}
		i++
		return nil
	})
	if err != nil || i != len(ls) {
		t.Fatalf("read %d summaries: %v", i, err)
	}
}

func TestIndexThatLagsOrIsTornCoversLess(t *testing.T) {
	dir := t.TempDir()
	path := writeRun(t, dir, lines())
	ix := lineindex.PathOf(path)
	st, _ := os.Stat(ix)
	// The last frame (one line) half written.
	if err := os.Truncate(ix, st.Size()-5); err != nil {
		t.Fatal(err)
	}
	c, err := check(t, path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lines() != 2 {
		t.Fatalf("covers %d lines, want the 2 of the whole frame", c.Lines())
	}
	// Appending after the whole frames mends it.
	w, err := lineindex.Reopen(ix, c.Size())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	s := lineindex.Summarize(&lines()[2])
	lineindex.Place(&s, c.End(), data[c.End():])
	dst, _ := os.Stat(path)
	if err := w.Append([]lineindex.Summary{s}, dst.Size(), dst.ModTime()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if c, err := check(t, path); err != nil || c.Lines() != 3 {
		t.Fatalf("after mending: %v", err)
	}
}

func TestIndexThatDisagreesIsRefused(t *testing.T) {
	for name, spoil := range map[string]func(t *testing.T, path string){
		"file cut": func(t *testing.T, path string) {
			st, _ := os.Stat(path)
			must(t, os.Truncate(path, st.Size()-10))
		},
		"line changed in place": func(t *testing.T, path string) {
			st, _ := os.Stat(path)
			b, _ := os.ReadFile(path)
			b[bytes.IndexByte(b, 'w')] = 'v' // the first worker's name
			must(t, os.WriteFile(path, b, 0o644))
			must(t, os.Chtimes(path, st.ModTime(), st.ModTime())) // even with its time kept
		},
		"file touched": func(t *testing.T, path string) {
			must(t, os.Chtimes(path, time.Now(), time.Now().Add(time.Hour)))
		},
		"frame damaged": func(t *testing.T, path string) {
			ix := lineindex.PathOf(path)
			b, _ := os.ReadFile(ix)
			b[40] ^= 0xff
			must(t, os.WriteFile(ix, b, 0o644))
		},
		"another file's index": func(t *testing.T, path string) {
			other := writeRun(t, t.TempDir(), lines()[1:])
			b, _ := os.ReadFile(lineindex.PathOf(other))
			must(t, os.WriteFile(lineindex.PathOf(path), b, 0o644))
		},
		"not an index": func(t *testing.T, path string) {
			must(t, os.WriteFile(lineindex.PathOf(path), []byte("hello\n"), 0o644))
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeRun(t, t.TempDir(), lines())
			spoil(t, path)
			_, err := check(t, path)
			var d *lineindex.Disagreement
			if !errors.As(err, &d) {
				t.Fatalf("checked: %v", err)
			}
			t.Log(err)
		})
	}
}

func TestFileLongerThanItsIndexIsCoveredInPart(t *testing.T) {
	path := writeRun(t, t.TempDir(), lines())
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString(`{"id":"more"}` + "\n")
	must(t, err)
	f.Close()
	c, err := check(t, path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if c.End() >= st.Size() || c.Lines() != 3 {
		t.Fatalf("covers %d of %d bytes, %d lines", c.End(), st.Size(), c.Lines())
	}
}

func TestMissingIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), dataset.CompletionsFile)
	must(t, os.WriteFile(path, nil, 0o644))
	if _, err := check(t, path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

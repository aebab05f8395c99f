package dataset

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// readAllRecords reads every record of path.
func readAllRecords(t *testing.T, path string, opts ParseOptions) (*Reader, []Record) {
	t.Helper()
	rd, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	var recs []Record
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rd, recs
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
}

// A Parquet file written by Apache Arrow (testdata/parquetgen) with
// messages as a list of {role, content} structs, over two row groups.
func TestParquetMessages(t *testing.T) {
	rd, recs := readAllRecords(t, "testdata/messages.parquet", ParseOptions{})
	if rd.Form() != Parquet || rd.Unit() != "row" {
		t.Fatalf("form %v, unit %s", rd.Form(), rd.Unit())
	}
	want := []struct {
		id   string
		msgs []schema.Message
	}{
		{"m-1", []schema.Message{system("You are terse."), user("What is 2+2?")}},
		{"m-2", []schema.Message{user("Name a prime.")}},
		{"m-3", []schema.Message{user("Hi"), assistant("Hello!"), user("Bye")}},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		r := recs[i]
		if r.Err != nil || r.N != i+1 || r.Line.ID != w.id || !sameMessages(r.Line.Messages, w.msgs) {
			t.Errorf("row %d: %+v, want %s %+v", i+1, r, w.id, w.msgs)
		}
	}
	if rd.Count() != 3 || rd.Offset() != rd.Info().Size() {
		t.Errorf("count %d, offset %d of %d", rd.Count(), rd.Offset(), rd.Info().Size())
	}
	// --turns all reads the same rows as lines.
	_, recs = readAllRecords(t, "testdata/messages.parquet", ParseOptions{Turns: schema.TurnsAll})
	if m := recs[2].Line.Messages; len(m) != 3 || m[1].Role != "assistant" || m[1].Content != "" {
		t.Errorf("turns all: %+v", m)
	}
}

// ShareGPT conversations and params stored as JSON text, integer ids.
func TestParquetConversationsAndParams(t *testing.T) {
	_, recs := readAllRecords(t, "testdata/conversations.parquet", ParseOptions{})
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	a, b := recs[0], recs[1]
	if a.Err != nil || a.Line.ID != "101" || !sameMessages(a.Line.Messages, []schema.Message{user("Tell me a joke.")}) {
		t.Errorf("row 1: %+v", a)
	}
	if p := a.Line.Params; p == nil || p.MaxTokens != 64 || p.Temperature == nil || *p.Temperature != 0.2 {
		t.Errorf("row 1 params: %s", paramsText(p))
	}
	if b.Err != nil || b.Line.ID != "102" || b.Line.Params != nil || !sameMessages(b.Line.Messages, []schema.Message{system("Answer in French."), user("Good morning")}) {
		t.Errorf("row 2: %+v", b)
	}
}

// Bad rows are reported by row number, as a JSONL file's by line, and
// reading goes on after them.
func TestParquetBadRows(t *testing.T) {
	_, recs := readAllRecords(t, "testdata/bad.parquet", ParseOptions{})
	if len(recs) != 5 {
		t.Fatalf("%d records", len(recs))
	}
	for i, want := range []string{"", "no messages, conversations or prompt field", "messages is empty", "", ""} {
		r := recs[i]
		if want == "" && r.Err != nil || want != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), want)) {
			t.Errorf("row %d: %v, want %q", r.N, r.Err, want)
		}
	}
	// Duplicates are a property of the file, found by its readers (the
	// producer, reconcile): the fourth row repeats the first's id.
	if recs[3].Line.ID != recs[0].Line.ID {
		t.Errorf("ids %q %q", recs[0].Line.ID, recs[3].Line.ID)
	}
}

func TestParquetWithoutPromptColumn(t *testing.T) {
	_, err := Open("testdata/noprompt.parquet", ParseOptions{})
	if err == nil || !strings.Contains(err.Error(), "testdata/noprompt.parquet: a Parquet prompts file needs a messages, conversations or prompt column, and this one has only id, text") {
		t.Fatalf("error %v", err)
	}
}

// The magic bytes decide, not the name; a file named .parquet that is
// JSONL is read as JSONL.
func TestFormDetectedByContent(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/messages.parquet")
	if err != nil {
		t.Fatal(err)
	}
	noName := filepath.Join(dir, "prompts.data")
	if err := os.WriteFile(noName, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if rd, recs := readAllRecords(t, noName, ParseOptions{}); rd.Form() != Parquet || len(recs) != 3 {
		t.Errorf("%s: form %v, %d records", noName, rd.Form(), len(recs))
	}
	fake := filepath.Join(dir, "fake.parquet")
	if err := os.WriteFile(fake, []byte(`{"id":"a","prompt":"q"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rd, recs := readAllRecords(t, fake, ParseOptions{}); rd.Form() != JSONL || len(recs) != 1 || recs[0].Line.ID != "a" {
		t.Errorf("%s: form %v, %+v", fake, rd.Form(), recs)
	}
}

// Damaged Parquet files are errors, never panics: bytes of a fixture
// and bytes flipped all through it.
func TestParquetDamagedNeverPanics(t *testing.T) {
	data, err := os.ReadFile("testdata/bad.parquet")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := 4; i < len(data)-4; i += 3 {
		b := append([]byte(nil), data...)
		b[i] ^= 0xff
		path := filepath.Join(dir, fmt.Sprintf("flip%d.parquet", i))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		rd, err := Open(path, ParseOptions{})
		if err != nil {
			continue
		}
		for {
			rec, err := rd.Next()
			if err != nil {
				break
			}
			if rec.Err == nil {
				checkParsed(t, []byte(path), rec.Line.ID, rec.Line.Messages)
			}
		}
		rd.Close()
	}
}

// A length_hint column is read as a line's length_hint.
func TestParquetLengthHintColumn(t *testing.T) {
	line, err := rowLine(map[string]any{"id": "r1", "prompt": "q", "length_hint": int64(420), "other": "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ParseLineWith(line, ParseOptions{})
	if err != nil || l.LengthHint != 420 {
		t.Errorf("row as %s: hint %d, %v; want 420", line, l.LengthHint, err)
	}
}

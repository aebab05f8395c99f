package dataset

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

type readLine struct {
	line    int
	data    string
	tooLong bool
}

func readAll(t *testing.T, r io.Reader, max int) []readLine {
	t.Helper()
	lr := NewLineReader(r, max)
	var got []readLine
	for {
		data, _, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, readLine{lr.Line(), string(data), tooLong})
	}
}

func TestLineReaderShortLines(t *testing.T) {
	in := "short\n" + strings.Repeat("x", 17) + "\n" + strings.Repeat("y", 16) + "\r\n\nlast"
	got := readAll(t, strings.NewReader(in), 16)
	want := []readLine{
		{1, "short", false},
		{2, "", true},
		{3, strings.Repeat("y", 16), false},
		{4, "", false},
		{5, "last", false},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i+1, got[i], want[i])
		}
	}
}

// Lines longer than the read buffer are assembled whole; lines longer than
// the limit are skipped without losing the next line.
func TestLineReaderLongLines(t *testing.T) {
	big := bytes.Repeat([]byte("a"), 3*readBufferSize+17)
	huge := bytes.Repeat([]byte("b"), 9*readBufferSize)
	var in bytes.Buffer
	in.Write(big)
	in.WriteString("\n")
	in.Write(huge)
	in.WriteString("\r\nnext\n")
	got := readAll(t, &in, 4*readBufferSize)
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3", len(got))
	}
	if got[0].tooLong || got[0].data != string(big) {
		t.Errorf("line 1: %d bytes, tooLong %v; want the %d bytes", len(got[0].data), got[0].tooLong, len(big))
	}
	if !got[1].tooLong || got[1].data != "" {
		t.Errorf("line 2 should be too long, got %d bytes", len(got[1].data))
	}
	if got[2] != (readLine{3, "next", false}) {
		t.Errorf("line 3: %+v", got[2])
	}
}

// A line's ending is reported: a last line without a newline is not
// ended, and Offset is just past each line's ending.
func TestLineReaderEnded(t *testing.T) {
	long := strings.Repeat("x", readBufferSize+10)
	in := "a\r\n\n" + long + "\nlast"
	lr := NewLineReader(strings.NewReader(in), 0)
	type line struct {
		data   string
		ended  bool
		offset int64
	}
	var got []line
	for {
		data, ended, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || tooLong {
			t.Fatal(err, tooLong)
		}
		got = append(got, line{string(data), ended, lr.Offset()})
	}
	want := []line{{"a", true, 3}, {"", true, 4}, {long, true, int64(5 + len(long))}, {"last", false, int64(len(in))}}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q (ended %v, offset %d), want %q (ended %v, offset %d)", i+1,
				Truncate(got[i].data, 20), got[i].ended, got[i].offset, Truncate(want[i].data, 20), want[i].ended, want[i].offset)
		}
	}
	if lr.Line() != 4 {
		t.Errorf("line number %d, want 4", lr.Line())
	}
}

// A too-long last line without a newline is reported as not ended, so
// that a reader of a file being appended to can take it for a torn write.
func TestLineReaderTornTooLong(t *testing.T) {
	lr := NewLineReader(strings.NewReader("ok\n"+strings.Repeat("z", 40)), 16)
	if data, ended, tooLong, err := lr.Next(); string(data) != "ok" || !ended || tooLong || err != nil {
		t.Fatalf("line 1: %q %v %v %v", data, ended, tooLong, err)
	}
	if data, ended, tooLong, err := lr.Next(); data != nil || ended || !tooLong || err != nil {
		t.Fatalf("line 2: %q %v %v %v", data, ended, tooLong, err)
	}
	if _, _, _, err := lr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last line: %v", err)
	}
}

// A line's unit is its id (ParseID's rule: a number is its digits) and
// its sample (an integer from 0; none is sample 0), read without decoding
// the rest of the line.
func TestLineUnit(t *testing.T) {
	type unit struct {
		u         schema.Unit
		hasSample bool
	}
	for line, want := range map[string]unit{
		`{"id": "a", "content": "x"}`:                {schema.Unit{ID: "a"}, false},
		`{"messages": [{"id": "inner"}], "id": "b"}`: {schema.Unit{ID: "b"}, false},
		`{"id": 42}`:                           {schema.Unit{ID: "42"}, false},
		`{"id": -0}`:                           {schema.Unit{ID: "0"}, false},
		`{"id": "\u00e9t\u00e9"}`:              {schema.Unit{ID: "été"}, false},
		`{"id": "c", "content": "unterminated`: {schema.Unit{ID: "c"}, false},
		`{"id": "d"} trailing`:                 {schema.Unit{ID: "d"}, false},
		`{"n": {"id": "nested"}, "id": "e", "tail": [1,2]}`: {schema.Unit{ID: "e"}, false},
		`{"id": "f", "sample": 0}`:                          {schema.Unit{ID: "f"}, true},
		`{"sample": 3, "id": "g", "content": "x"}`:          {schema.Unit{ID: "g", Sample: 3}, true},
		`{"id": "h", "content": "x", "sample": 2}`:          {schema.Unit{ID: "h", Sample: 2}, true},
		"{\"id\": \"i\", \"sample\": 1}\n":                  {schema.Unit{ID: "i", Sample: 1}, true},
	} {
		u, hasSample, err := LineUnit([]byte(line))
		if err != nil || (unit{u, hasSample}) != want {
			t.Errorf("LineUnit(%s) = %+v, %v, %v; want %+v", line, u, hasSample, err, want)
		}
	}
	for line, wantErr := range map[string]string{
		``:                             "not a JSON object",
		`[]`:                           "not a JSON object",
		`not json`:                     "not a JSON object",
		`{"x": 1}`:                     "no id",
		`{"id": 1.5}`:                  "not an integer",
		`{"id": ""}`:                   "empty",
		`{"id": null}`:                 "string or an integer",
		`{"id": "a", "sample": -1}`:    "sample",
		`{"id": "a", "sample": 1.0}`:   "sample",
		`{"id": "a", "sample": 1e2}`:   "sample",
		`{"id": "a", "sample": "one"}`: "sample",
		`{"id": "a", "sample": null}`:  "sample",
		`{"sample": 1, "id": 2.5}`:     "not an integer",
	} {
		if u, _, err := LineUnit([]byte(line)); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("LineUnit(%s) = %+v, %v; want an error saying %q", line, u, err, wantErr)
		}
	}
}

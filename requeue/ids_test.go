package requeue

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

func TestLineID(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		`{"id": "a", "content": "x"}`:                "a",
		`{"messages": [{"id": "inner"}], "id": "b"}`: "b",
		`{"id": 42}`:                                        "42",
		`{"id": "\u00e9t\u00e9"}`:                           "été",
		`{"id": "c", "content": "unterminated`:              "c",
		`{"id": "d"} trailing`:                              "d",
		`{"n": {"id": "nested"}, "id": "e", "tail": [1,2]}`: "e",
	} {
		got, err := lineID([]byte(line))
		if err != nil || got != want {
			t.Errorf("lineID(%s) = %q, %v; want %q", line, got, err, want)
		}
	}
	for _, line := range []string{``, `[]`, `{"x": 1}`, `{"id": 1.5}`, `{"id": ""}`, `{"id": null}`, `not json`} {
		if got, err := lineID([]byte(line)); err == nil {
			t.Errorf("lineID(%s) = %q, want an error", line, got)
		}
	}
}

func TestLineReader(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", readBufferSize+10)
	lr := newLineReader(strings.NewReader("a\r\n\n" + long + "\nlast"))
	type line struct {
		data  string
		ended bool
	}
	var got []line
	for {
		data, ended, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || tooLong {
			t.Fatal(err, tooLong)
		}
		got = append(got, line{string(data), ended})
	}
	want := []line{{"a", true}, {"", true}, {long, true}, {"last", false}}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q (ended %v), want %q (ended %v)", i+1, dataset.Truncate(got[i].data, 20), got[i].ended, dataset.Truncate(want[i].data, 20), want[i].ended)
		}
	}
	if lr.line != 4 {
		t.Errorf("line number %d, want 4", lr.line)
	}
}

func TestReadIDs(t *testing.T) {
	t.Parallel()
	file := writeLines(t, t.TempDir(), "ids", "plain id", `  "quoted"  `, "", `{"id": 7}`, "plain id", `{"reason": "x", "id": "obj"}`,
		`{"id": "obj", "sample": 2}`, `{"sample": 0, "id": "obj"}`, `{"id": "obj", "sample": 2}`)
	got, err := readIDs(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []selection{{id: "plain id"}, {id: "quoted"}, {id: "7"}, {id: "obj"}, {id: "obj", sample: 2, one: true}, {id: "obj", one: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("selections %+v, want %+v", got, want)
	}
	bad := writeLines(t, t.TempDir(), "ids", "ok", `{"no": "id"}`)
	if _, err := readIDs(bad); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("error %v, want one naming line 2", err)
	}
	bad = writeLines(t, t.TempDir(), "ids", "ok", "fine", `{"id": "x", "sample": -1}`)
	if _, err := readIDs(bad); err == nil || !strings.Contains(err.Error(), ":3:") || !strings.Contains(err.Error(), "sample") {
		t.Fatalf("error %v, want one naming line 3 and its sample", err)
	}
}

// An output file's units: a line without "sample" (written before
// samples existed) is sample 0, and a sample after the id counts.
func TestOutputUnits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys, found, err := outputUnits(dir + "/none.jsonl")
	if err != nil || found || len(keys) != 0 {
		t.Fatalf("missing file: %v, %v, %v", keys, found, err)
	}
	path := writeLines(t, dir, "out.jsonl", `{"id": "a"}`, `{"id": "b", "content": "x"}`,
		`{"id": "b", "sample": 1, "content": "x"}`, `{"id": "c", "sample": 0}`)
	appendTo(t, path, `{"id": "torn", "con`)
	keys, found, err = outputUnits(path)
	want := []schema.Unit{{ID: "a"}, {ID: "b"}, {ID: "b", Sample: 1}, {ID: "c"}}
	if err != nil || !found || len(keys) != len(want) {
		t.Fatalf("units %q, %v, %v", keys, found, err)
	}
	for _, u := range want {
		if !keys.has(u.Key()) {
			t.Errorf("%+v missing from %q", u, keys)
		}
	}
	bad := writeLines(t, dir, "bad.jsonl", `{"id": "a", "sample": "one"}`)
	if _, _, err := outputUnits(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl:1:") {
		t.Errorf("error %v, want one naming bad.jsonl:1", err)
	}
}

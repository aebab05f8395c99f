package requeue

import (
	"errors"
	"io"
	"strings"
	"testing"
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
			t.Errorf("line %d: %q (ended %v), want %q (ended %v)", i+1, truncate(got[i].data, 20), got[i].ended, truncate(want[i].data, 20), want[i].ended)
		}
	}
	if lr.line != 4 {
		t.Errorf("line number %d, want 4", lr.line)
	}
}

func TestReadIDs(t *testing.T) {
	t.Parallel()
	file := writeLines(t, t.TempDir(), "ids", "plain id", `  "quoted"  `, "", `{"id": 7}`, "plain id", `{"reason": "x", "id": "obj"}`)
	got, err := readIDs(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"plain id", "quoted", "7", "obj"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("ids %q, want %q", got, want)
	}
	bad := writeLines(t, t.TempDir(), "ids", "ok", `{"no": "id"}`)
	if _, err := readIDs(bad); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("error %v, want one naming line 2", err)
	}
}

func TestOutputIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids, found, err := outputIDs(dir + "/none.jsonl")
	if err != nil || found || len(ids) != 0 {
		t.Fatalf("missing file: %v, %v, %v", ids, found, err)
	}
	path := writeLines(t, dir, "out.jsonl", `{"id": "a"}`, `{"id": "b", "content": "x"}`)
	appendTo(t, path, `{"id": "torn", "con`)
	ids, found, err = outputIDs(path)
	if err != nil || !found || len(ids) != 2 || !ids.has("a") || !ids.has("b") {
		t.Fatalf("ids %v, %v, %v", ids, found, err)
	}
}

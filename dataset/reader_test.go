package dataset

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

type readLine struct {
	line    int
	data    string
	tooLong bool
}

func readAll(t *testing.T, r io.Reader, max int) []readLine {
	t.Helper()
	lr := newLineReader(r, max)
	var got []readLine
	for {
		data, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, readLine{lr.line, string(data), tooLong})
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

package requeue

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// maxLineBytes bounds one line of any file read here. A prompt or an
// answer of 64 MiB is far past any server's max_payload, so a longer line
// is reported rather than read into memory.
const maxLineBytes = 64 << 20

// Buffer sizes of the line reader: most lines are used in place in the
// read buffer; a longer one is assembled in a buffer that is dropped once
// it grew past keepLineBuffer, so one huge line does not pin its memory.
const (
	readBufferSize = 256 << 10
	keepLineBuffer = 4 << 20
)

// lineReader reads a file one line at a time.
type lineReader struct {
	r    *bufio.Reader
	buf  []byte
	line int // number of the line last returned
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, readBufferSize)}
}

// next returns the next line without its line ending, valid until the
// following call. ended is false for a last line with no newline after
// it. A line longer than maxLineBytes is consumed and returned with
// tooLong set and no data. After the last line, err is io.EOF.
func (lr *lineReader) next() (data []byte, ended, tooLong bool, err error) {
	if cap(lr.buf) > keepLineBuffer {
		lr.buf = nil
	}
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !tooLong {
				lr.buf = append(lr.buf, chunk...)
				if len(lr.buf) > maxLineBytes+2 { // slack for "\r\n"
					tooLong, lr.buf = true, lr.buf[:0]
				}
			}
			continue
		case err == nil, errors.Is(err, io.EOF) && (len(chunk) > 0 || len(lr.buf) > 0 || tooLong):
			lr.line++
			if tooLong {
				return nil, err == nil, true, nil
			}
			data = chunk
			if len(lr.buf) > 0 {
				lr.buf = append(lr.buf, chunk...)
				data = lr.buf
			}
			data = bytes.TrimSuffix(data, []byte("\n"))
			data = bytes.TrimSuffix(data, []byte("\r"))
			if len(data) > maxLineBytes {
				return nil, err == nil, true, nil
			}
			return data, err == nil, false, nil
		default:
			return nil, false, false, err
		}
	}
}

var errNoID = errors.New(`no "id" field`)

// lineID returns the "id" of a JSON object line without decoding the rest
// of the line beyond it: aerie's output lines start with the id, and an
// answer can run to megabytes.
func lineID(line []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", errors.New("not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", err
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return "", err
		}
		if key, _ := t.(string); key == "id" {
			return idText(value)
		}
	}
	return "", errNoID
}

// idText reads an id given as a JSON string or integer (as the producer
// reads it: an integer id is its decimal text).
func idText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		if s == "" {
			return "", errors.New("the id is an empty string")
		}
		return s, nil
	case isInteger(raw):
		if string(raw) == "-0" {
			return "0", nil
		}
		return string(raw), nil
	}
	return "", fmt.Errorf("the id %s is neither a string nor an integer: write it as a string, the way it appears in completions.jsonl", strconv.Quote(truncate(string(raw), 40)))
}

func isInteger(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	if len(raw) == 0 {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// truncate shortens s to at most n bytes for a message, marking the cut,
// which falls between two characters.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

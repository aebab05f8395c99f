package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/aerie-dev/aerie/schema"
)

// MaxLineBytes bounds one line of any file aerie reads: prompts files,
// ids files and its own output files. Long-context prompts run to a few
// MiB; a line beyond 64 MiB is far past any server's max_payload, so it is
// reported instead of being read into memory.
const MaxLineBytes = 64 << 20

// Buffer sizes of LineReader. Most lines fit the read buffer and are used
// in place; a longer one is assembled in a buffer that is dropped
// afterwards when it grew past keepLineBuffer, so one huge line does not
// pin its memory for the rest of the file.
const (
	readBufferSize = 256 << 10
	keepLineBuffer = 4 << 20
)

// LineReader reads a file one line at a time, holding no more than one
// line in memory, and reports a line longer than its bound instead of
// reading it whole. Every reader of aerie's line files uses it, so a line
// ends, and is too long, by the same rule everywhere. Its zero value is not
// usable: use NewLineReader.
type LineReader struct {
	r     *bufio.Reader
	max   int
	buf   []byte
	line  int   // number of the line last returned
	bytes int64 // bytes consumed so far
}

// NewLineReader reads r line by line; a line longer than maxBytes
// (without its line ending) is too long. maxBytes of 0 or less means
// MaxLineBytes.
func NewLineReader(r io.Reader, maxBytes int) *LineReader {
	if maxBytes <= 0 {
		maxBytes = MaxLineBytes
	}
	return &LineReader{r: bufio.NewReaderSize(r, readBufferSize), max: maxBytes}
}

// Next returns the next line without its line ending ("\n" or "\r\n"),
// valid until the following call. ended is false for a last line with no
// newline after it: in a file being appended to, the trace of a write cut
// short. A line longer than the bound is consumed and returned with
// tooLong set and no data. After the last line, err is io.EOF; any other
// error is the underlying reader's.
func (lr *LineReader) Next() (line []byte, ended, tooLong bool, err error) {
	if cap(lr.buf) > keepLineBuffer {
		lr.buf = nil
	}
	lr.buf = lr.buf[:0]
	seen := 0
	for {
		chunk, err := lr.r.ReadSlice('\n')
		seen += len(chunk)
		lr.bytes += int64(len(chunk))
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			// Two bytes of slack for a "\r\n" ending.
			if seen > lr.max+2 {
				tooLong = true
				lr.buf = lr.buf[:0]
			} else if !tooLong {
				lr.buf = append(lr.buf, chunk...)
			}
			continue
		case err == nil || (errors.Is(err, io.EOF) && seen > 0):
			lr.line++
			ended = err == nil
			if tooLong {
				return nil, ended, true, nil
			}
			line = chunk
			if len(lr.buf) > 0 {
				lr.buf = append(lr.buf, chunk...)
				line = lr.buf
			}
			line = bytes.TrimSuffix(line, []byte("\n"))
			line = bytes.TrimSuffix(line, []byte("\r"))
			if len(line) > lr.max {
				return nil, ended, true, nil
			}
			return line, ended, false, nil
		default:
			return nil, false, false, err
		}
	}
}

// Resume tells a reader started in the middle of a file how many lines
// and bytes come before where it starts, so that Line and Offset count
// from the file's start.
func (lr *LineReader) Resume(lines int, offset int64) {
	lr.line, lr.bytes = lines, offset
}

// Line is the 1-based number of the line Next last returned; 0 before the
// first.
func (lr *LineReader) Line() int { return lr.line }

// Offset is the number of bytes consumed so far: after a line Next
// returned, the offset just past its line ending.
func (lr *LineReader) Offset() int64 { return lr.bytes }

// ErrNoID is the error of an output line without an id.
var ErrNoID = errors.New(`no id: the line has no "id" field`)

// LineUnit returns the unit of a JSON object line (an output line of
// aerie's, or a failed.jsonl line given as an ids file): its "id", read
// by ParseID (an id that is a number is its digits), and its "sample", an
// integer from 0. hasSample is false when the line has no "sample" (an
// output line written before samples existed), which is sample 0. It
// decodes nothing beyond the two: aerie's output lines start with them,
// and an answer can run to megabytes. Once the id is read, a line that
// does not go on as JSON is taken to have no sample; a caller that needs
// the whole line valid checks it.
func LineUnit(line []byte) (u schema.Unit, hasSample bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return schema.Unit{}, false, errors.New("not a JSON object")
	}
	hasID := false
	for dec.More() && !(hasID && hasSample) {
		t, err := dec.Token()
		var value json.RawMessage
		if err == nil {
			err = dec.Decode(&value)
		}
		if err != nil {
			if hasID {
				break // what follows the id does not matter unless it is the sample
			}
			return schema.Unit{}, false, err
		}
		switch key, _ := t.(string); key {
		case "id":
			if u.ID, err = ParseID(value); err != nil {
				return schema.Unit{}, false, err
			}
			hasID = true
		case "sample":
			if u.Sample, err = ParseSample(value); err != nil {
				return schema.Unit{}, false, err
			}
			hasSample = true
		}
	}
	if !hasID {
		return schema.Unit{}, false, ErrNoID
	}
	return u, hasSample, nil
}

// ParseSample reads a sample: a JSON integer from 0.
func ParseSample(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 0 || !IsInteger(raw) {
		return 0, fmt.Errorf("the sample %s is not an integer from 0", strconv.Quote(Truncate(string(raw), 40)))
	}
	return n, nil
}

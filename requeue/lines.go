package requeue

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/aerie-dev/aerie/dataset"
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

// lineID returns the "id" of a JSON object line (see lineUnit).
func lineID(line []byte) (string, error) {
	id, _, _, err := lineUnit(line)
	return id, err
}

// lineUnit returns the "id" and the "sample" of a JSON object line;
// hasSample is false when the line has no "sample" (an output line
// written before samples existed: sample 0). It decodes nothing beyond
// the two: aerie's output lines start with them, and an answer can run
// to megabytes. Once the id is read, a line that does not go on as JSON
// is taken to have no sample.
func lineUnit(line []byte) (id string, sample int, hasSample bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", 0, false, errors.New("not a JSON object")
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
			return "", 0, false, err
		}
		switch key, _ := t.(string); key {
		case "id":
			if id, err = idText(value); err != nil {
				return "", 0, false, err
			}
			hasID = true
		case "sample":
			if sample, err = sampleNumber(value); err != nil {
				return "", 0, false, err
			}
			hasSample = true
		}
	}
	if !hasID {
		return "", 0, false, errNoID
	}
	return id, sample, hasSample, nil
}

// sampleNumber reads a sample: a JSON integer from 0.
func sampleNumber(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 0 || !dataset.IsInteger(raw) {
		return 0, fmt.Errorf("the sample %s is not an integer from 0", strconv.Quote(dataset.Truncate(string(raw), 40)))
	}
	return n, nil
}

// idText reads an id given as a JSON string or integer, by the rule
// every reader of ids follows (dataset.ParseID).
func idText(raw json.RawMessage) (string, error) {
	id, err := dataset.ParseID(raw)
	if err != nil {
		return "", fmt.Errorf("%v; write the id the way it appears in completions.jsonl", err)
	}
	return id, nil
}

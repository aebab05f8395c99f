package openai

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// maxSSELine bounds one line of the event stream. A chunk normally holds
// a token or two; the bound only stops a broken server from exhausting
// memory, so it is far above any real chunk.
const maxSSELine = 64 << 20

// lineTooLongError reports a line longer than maxSSELine.
type lineTooLongError struct{ limit int }

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("event stream line longer than %d bytes", e.limit)
}

// sseReader splits a server-sent event stream into the data of each
// event. It follows the event-stream format where it matters here:
// lines end in "\n" or "\r\n"; a line starting with ':' is a comment;
// "data:" lines (one optional space after the colon) accumulate until a
// blank line ends the event; other fields (event, id, retry) are
// ignored; an event not finished by a blank line when the stream ends is
// dropped. Lines have no fixed length limit below maxSSELine, unlike
// bufio.Scanner's 64 KiB default.
//
// A "data: [DONE]" line ends the stream as soon as it is read, even
// without the blank line after it.
type sseReader struct {
	r    *bufio.Reader
	line []byte // current line, reused
	data []byte // data of the event being assembled, reused
	// pending is set when data holds at least one data line.
	pending bool
	// done is set once [DONE] has been read.
	done bool
}

// sseBufferSize is the read buffer of one stream. A chunk of a chat
// stream is a few hundred bytes and the connection below has a buffer
// of its own, so a small buffer costs no extra reads; a longer line
// simply takes several.
const sseBufferSize = 4 << 10

// maxPooledScratch bounds the line and event buffers a reader keeps when
// it goes back to the pool, so that one huge event does not pin its
// memory for the life of the process.
const maxPooledScratch = 64 << 10

// sseReaders recycles readers, buffers included, across streams: a
// worker opens one stream per prompt, and a fresh buffer per stream was
// a third of all the bytes a run allocated.
var sseReaders = sync.Pool{New: func() any {
	return &sseReader{r: bufio.NewReaderSize(nil, sseBufferSize)}
}}

// newSSEReader returns a reader of r from the pool; release hands it
// back.
func newSSEReader(r io.Reader) *sseReader {
	s := sseReaders.Get().(*sseReader)
	s.r.Reset(r)
	return s
}

// release returns s to the pool. Neither s nor any slice it returned
// may be used after.
func (s *sseReader) release() {
	s.r.Reset(nil)
	if cap(s.line) > maxPooledScratch {
		s.line = nil
	}
	if cap(s.data) > maxPooledScratch {
		s.data = nil
	}
	s.line, s.data = s.line[:0], s.data[:0]
	s.pending, s.done = false, false
	sseReaders.Put(s)
}

var doneMarker = []byte("[DONE]")

// next returns the data of the next event. done is true once the [DONE]
// marker has been read (after any event before it has been returned).
// At the end of the stream it returns io.EOF. The returned slice is only
// valid until the next call.
func (s *sseReader) next() (data []byte, done bool, err error) {
	if s.done {
		return nil, true, nil
	}
	s.data, s.pending = s.data[:0], false
	for {
		line, err := s.readLine()
		if err != nil {
			return nil, false, err
		}
		if len(line) == 0 {
			if s.pending {
				return s.data, false, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // comment, often a keep-alive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if bytes.Equal(bytes.TrimSpace(value), doneMarker) {
			s.done = true
			if s.pending {
				return s.data, false, nil
			}
			return nil, true, nil
		}
		if s.pending {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.pending = true
	}
}

// readLine returns the next line without its line ending. A last line
// without a line ending is returned as a line; after it comes io.EOF.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(s.line)+len(frag) > maxSSELine {
			return nil, &lineTooLongError{limit: maxSSELine}
		}
		s.line = append(s.line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !(errors.Is(err, io.EOF) && len(s.line) > 0) {
			return nil, err
		}
		break
	}
	line := bytes.TrimSuffix(s.line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

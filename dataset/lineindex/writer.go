package lineindex

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"

	"github.com/aerie-dev/aerie/fsmode"
)

// Writer appends frames to an index. It never fsyncs: the file it indexes
// is fsynced before each frame, and an index that lost its last frames
// in a crash only lags the file (see the package comment). Its methods
// are not safe for concurrent use.
type Writer struct {
	f    *os.File
	path string
	buf  []byte
}

// Create starts the index at path anew, empty: it covers nothing yet.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fsmode.File)
	if err != nil {
		return nil, fmt.Errorf("create line index: %w", err)
	}
	w := &Writer{f: f, path: path}
	p := append(w.start(), kindHeader)
	p = append(p, magic...)
	p = binary.AppendUvarint(p, version)
	if err := w.frame(p); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Reopen appends to the index at path after its first size bytes, those
// that Check found whole; a torn frame after them goes.
func Reopen(path string, size int64) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen line index: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("reopen line index %s: %w", path, err)
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("reopen line index %s: %w", path, err)
	}
	return &Writer{f: f, path: path}, nil
}

// Place sets where s's line is: it starts at offset, and line is its
// bytes with its newline.
func Place(s *Summary, offset int64, line []byte) {
	s.Offset, s.Length, s.CRC = offset, len(line), Checksum(line)
}

// PlaceRead sets where s's line is when it was read back: it starts at
// offset, line is its bytes without its line ending, and next is where
// the next line starts.
func PlaceRead(s *Summary, offset int64, line []byte, next int64) {
	s.Offset, s.Length = offset, int(next-offset)
	crc := crc32.Update(0, castagnoli, line)
	switch s.Length - len(line) {
	case 1:
		crc = crc32.Update(crc, castagnoli, []byte("\n"))
	case 2:
		crc = crc32.Update(crc, castagnoli, []byte("\r\n"))
	}
	s.CRC = crc
}

// Append writes one frame of placed summaries, in the order of their
// lines. end is the end of the prefix of the file now covered (the end
// of the last line), and modified the file's modification time after
// the lines were written; a frame of no summaries records that the file
// was cut back to end.
func (w *Writer) Append(sums []Summary, end int64, modified time.Time) error {
	p := append(w.start(), kindRecords)
	p = binary.AppendUvarint(p, uint64(end))
	p = binary.AppendVarint(p, modified.UnixNano())
	p = binary.AppendUvarint(p, uint64(len(sums)))
	for i := range sums {
		p = appendRecord(p, &sums[i])
	}
	return w.frame(p)
}

// start begins a frame in w's buffer: room for its length.
func (w *Writer) start() []byte { return append(w.buf[:0], 0, 0, 0, 0) }

// frame writes the frame b holds, begun by start: it fills in the
// payload's length and appends its checksum.
func (w *Writer) frame(b []byte) error {
	payload := b[4:]
	if len(payload) > maxFrame {
		return fmt.Errorf("write line index %s: a frame of %d bytes, more than %d", w.path, len(payload), maxFrame)
	}
	binary.LittleEndian.PutUint32(b, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, Checksum(payload))
	w.buf = b
	if _, err := w.f.Write(b); err != nil {
		return fmt.Errorf("write line index %s: %w", w.path, err)
	}
	return nil
}

// Close closes the index.
func (w *Writer) Close() error { return w.f.Close() }

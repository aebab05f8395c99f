package lineindex

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
)

// Disagreement says why an index cannot be trusted for its file.
type Disagreement struct {
	Path, Why string
}

func (d *Disagreement) Error() string {
	return fmt.Sprintf("line index %s disagrees with its file: %s", d.Path, d.Why)
}

// Checked is an index that Check found to agree with its file.
type Checked struct {
	path string
	// size is the bytes of its whole frames; a torn frame after them is
	// the trace of a crash.
	size int64
	// end is the end of the file's prefix it covers, and lines the lines
	// of that prefix.
	end   int64
	lines int
}

// End is the end of the prefix of the file that the index covers: the
// lines after it are not in the index.
func (c *Checked) End() int64 { return c.end }

// Lines is the number of lines of the covered prefix.
func (c *Checked) Lines() int { return c.lines }

// Size is the length of the index's whole frames, where Reopen appends.
func (c *Checked) Size() int64 { return c.size }

// samples is how many lines Check reads back at random, besides the
// first and the last.
const samples = 64

// readBuffer is the size of the reads of an index.
const readBuffer = 1 << 20

// Check reads the index at path and checks it against data, the file it
// indexes (see the package comment for what it checks). A missing index
// is an error for which errors.Is(err, os.ErrNotExist) holds; one that
// cannot be trusted, a *Disagreement.
func Check(path string, data *os.File) (*Checked, error) {
	st, err := data.Stat()
	if err != nil {
		return nil, fmt.Errorf("check line index: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, &Disagreement{Path: path, Why: err.Error()}
	}
	defer f.Close()
	c := &Checked{path: path}
	var (
		modified int64
		pick     sampler
		s        Summary
	)
	fst, err := f.Stat()
	if err != nil {
		return nil, &Disagreement{Path: path, Why: err.Error()}
	}
	err = c.frames(f, fst.Size(), func(d *decoder, frameEnd int64, at int64) error {
		n := d.count()
		for range n {
			d.record(&s)
			if d.err != nil {
				return fmt.Errorf("a damaged record in the frame that ends at byte %d", frameEnd)
			}
			if s.Offset != c.end || s.Length <= 0 {
				return fmt.Errorf("its line %d is at bytes %d-%d, where the line before ends at %d", c.lines+1, s.Offset, s.Offset+int64(s.Length), c.end)
			}
			c.end += int64(s.Length)
			c.lines++
			pick.see(place{s.Offset, s.Length, s.CRC})
		}
		modified = at
		return nil
	})
	if err != nil {
		return nil, &Disagreement{Path: path, Why: err.Error()}
	}
	switch {
	case c.end > st.Size():
		return nil, &Disagreement{Path: path, Why: fmt.Sprintf("it covers %d bytes, and the file has %d: the file was cut or replaced", c.end, st.Size())}
	case c.end == st.Size() && c.lines > 0 && modified != st.ModTime().UnixNano():
		return nil, &Disagreement{Path: path, Why: "the file was modified after its last indexed line was written (its modification time differs)"}
	}
	for _, p := range pick.all() {
		if why := p.verify(data); why != "" {
			return nil, &Disagreement{Path: path, Why: why}
		}
	}
	return c, nil
}

// frames reads the index's frames from f, total bytes long, checking
// the header and each frame's checksum, and calls records with a decoder
// of each records frame after its end and time. It sets c.size to the
// length of the whole frames; a torn frame at the end stops it without
// error.
func (c *Checked) frames(f io.Reader, total int64, records func(d *decoder, end, at int64) error) error {
	r := bufio.NewReaderSize(f, readBuffer)
	var (
		pos     int64
		payload []byte
		hdr     [4]byte
	)
	for first := true; ; first = false {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) && !first {
				return nil
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				if first {
					return errors.New("it has no header")
				}
				return nil // torn
			}
			return err
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:]))
		frameEnd := pos + frameOverhead + n
		if n > maxFrame || frameEnd > total {
			if frameEnd > total && !first {
				return nil // torn: the frame runs past the end
			}
			return fmt.Errorf("a frame of %d bytes at byte %d", n, pos)
		}
		if cap(payload) < int(n)+4 {
			payload = make([]byte, n+4)
		}
		payload = payload[:n+4]
		if _, err := io.ReadFull(r, payload); err != nil {
			return err
		}
		body := payload[:n]
		if Checksum(body) != binary.LittleEndian.Uint32(payload[n:]) {
			if frameEnd == total && !first {
				return nil // torn: the last frame, half written
			}
			return fmt.Errorf("the frame at byte %d fails its checksum", pos)
		}
		d := &decoder{b: body}
		kind := d.byte()
		switch {
		case first:
			if kind != kindHeader || !bytes.HasPrefix(d.b, []byte(magic)) {
				return errors.New("it is not an aerie line index")
			}
			d.b = d.b[len(magic):]
			if v := d.uvarint(); v != version {
				return fmt.Errorf("it is of version %d, and this aerie reads version %d", v, version)
			}
		case kind == kindRecords:
			end, at := int64(d.count()), d.varint()
			if d.err != nil {
				return fmt.Errorf("a damaged frame at byte %d", pos)
			}
			if err := records(d, frameEnd, at); err != nil {
				return err
			}
			if end != c.end {
				return fmt.Errorf("the frame at byte %d says it covers %d bytes, and its lines end at %d", pos, end, c.end)
			}
		default:
			return fmt.Errorf("a frame of unknown kind %q at byte %d", kind, pos)
		}
		pos = frameEnd
		c.size = pos
	}
}

// Each calls fn with the summary of every line the index covers, in the
// order of the file. The summary is reused: fn must copy what it keeps
// of Assistants.
func (c *Checked) Each(fn func(*Summary) error) error {
	f, err := os.Open(c.path)
	if err != nil {
		return fmt.Errorf("read line index: %w", err)
	}
	defer f.Close()
	again := &Checked{path: c.path}
	var s Summary
	err = again.frames(io.LimitReader(f, c.size), c.size, func(d *decoder, _, _ int64) error {
		n := d.count()
		for range n {
			d.record(&s)
			if d.err != nil {
				return d.err
			}
			again.end += int64(s.Length)
			again.lines++
			if err := fn(&s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read line index %s: %w", c.path, err)
	}
	if again.lines != c.lines {
		return fmt.Errorf("read line index %s: %d lines, where its check read %d (was it written meanwhile?)", c.path, again.lines, c.lines)
	}
	return nil
}

// place is where a line is and its checksum.
type place struct {
	offset int64
	length int
	crc    uint32
}

// verify reads the line at p back from data: it must follow a newline,
// end with one and have p's checksum. It returns what is wrong, or "".
func (p place) verify(data *os.File) string {
	start := max(p.offset-1, 0)
	b := make([]byte, p.offset+int64(p.length)-start)
	if _, err := data.ReadAt(b, start); err != nil {
		return fmt.Sprintf("cannot read back the line at byte %d: %v", p.offset, err)
	}
	if p.offset > 0 {
		if b[0] != '\n' {
			return fmt.Sprintf("no line starts at byte %d", p.offset)
		}
		b = b[1:]
	}
	if b[len(b)-1] != '\n' || Checksum(b) != p.crc {
		return fmt.Sprintf("the line at byte %d is not the one indexed there", p.offset)
	}
	return ""
}

// sampler keeps the first line seen, the last, and a uniform random
// sample of the others (reservoir sampling).
type sampler struct {
	n           int
	first, last place
	picked      []place
}

func (s *sampler) see(p place) {
	s.n++
	if s.n == 1 {
		s.first = p
		return
	}
	// The line seen before p is neither the first nor the last: it is
	// the middle line number m of a reservoir.
	if m := s.n - 2; m > 0 {
		if len(s.picked) < samples {
			s.picked = append(s.picked, s.last)
		} else if i := rand.IntN(m); i < samples {
			s.picked[i] = s.last
		}
	}
	s.last = p
}

func (s *sampler) all() []place {
	switch s.n {
	case 0:
		return nil
	case 1:
		return []place{s.first}
	}
	return append([]place{s.first, s.last}, s.picked...)
}

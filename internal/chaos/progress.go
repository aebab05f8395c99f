package chaos

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// progress is the share of prompts the aggregator has written to either
// output file.
type progress struct {
	total               int
	completions, failed *lineCounter
}

func (p *progress) lines() int { return p.completions.count() + p.failed.count() }

func (p *progress) share() float64 { return float64(p.lines()) / float64(p.total) }

func (p *progress) String() string {
	n := p.lines()
	return fmt.Sprintf("%d/%d (%.1f%%)", n, p.total, 100*float64(n)/float64(p.total))
}

// lineCounter counts the lines of a file that another process appends
// to, reading only what is new since the last call. A file that shrank
// (the aggregator cuts a torn last line when it starts) is counted again
// from the start.
type lineCounter struct {
	path   string
	offset int64
	lines  int
	buf    []byte
}

func newLineCounter(path string) *lineCounter {
	return &lineCounter{path: path, buf: make([]byte, 1<<20)}
}

// count returns the number of complete lines in the file now; a missing
// file has none.
func (c *lineCounter) count() int {
	f, err := os.Open(c.path)
	if err != nil {
		return 0
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return c.lines
	}
	if st.Size() < c.offset {
		c.offset, c.lines = 0, 0
	}
	if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
		return c.lines
	}
	for {
		n, err := f.Read(c.buf)
		c.lines += bytes.Count(c.buf[:n], []byte{'\n'})
		c.offset += int64(n)
		if err != nil || n == 0 {
			return c.lines
		}
	}
}

package lineindex_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/aerie-dev/aerie/dataset/lineindex"
)

// FuzzCheck gives Check and Each an index of any bytes, for a file of
// three lines: they may refuse it, never panic, and what they take must
// describe lines of the file. With framed, the bytes are the payload of
// a records frame with a right checksum after a right header, so that
// the records' decoding is reached.
func FuzzCheck(f *testing.F) {
	dir := f.TempDir()
	path := writeRun(f, dir, lines())
	good, err := os.ReadFile(lineindex.PathOf(path))
	if err != nil {
		f.Fatal(err)
	}
	header := good[:8+binary.LittleEndian.Uint32(good)]
	f.Add(good, false)
	f.Add(good[:len(good)/2], false)
	f.Add([]byte{}, false)
	rest := good[len(header):]
	f.Add(rest[4:4+binary.LittleEndian.Uint32(rest)], true)
	f.Fuzz(func(t *testing.T, index []byte, framed bool) {
		if framed {
			payload := index
			index = append([]byte(nil), header...)
			index = binary.LittleEndian.AppendUint32(index, uint32(len(payload)))
			index = append(index, payload...)
			index = binary.LittleEndian.AppendUint32(index, lineindex.Checksum(payload))
		}
		ix := filepath.Join(t.TempDir(), "x.index")
		if err := os.WriteFile(ix, index, 0o644); err != nil {
			t.Fatal(err)
		}
		data, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer data.Close()
		st, _ := data.Stat()
		c, err := lineindex.Check(ix, data)
		if err != nil {
			return
		}
		if c.End() > st.Size() || c.Lines() > 3 {
			t.Fatalf("covers %d bytes and %d lines of a file of %d and 3", c.End(), c.Lines(), st.Size())
		}
		n := 0
		if err := c.Each(func(s *lineindex.Summary) error {
			n++
			if s.Offset < 0 || s.Offset+int64(s.Length) > st.Size() {
				t.Fatalf("a line at bytes %d-%d of %d", s.Offset, s.Offset+int64(s.Length), st.Size())
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n != c.Lines() {
			t.Fatalf("each read %d, check %d", n, c.Lines())
		}
	})
}

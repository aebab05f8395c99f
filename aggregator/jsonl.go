package aggregator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/schema"
)

// jsonlFile is an append-only JSON Lines file with one line per unit of
// work: every line has an "id" and a "sample", and no two lines the same
// pair. Lines are keyed by schema.Unit.Key; a line without "sample"
// (written before samples existed) is sample 0. Appends are fsynced
// before the caller acknowledges the messages they came from, so a line
// that was acknowledged is on disk, and a message that was not is
// delivered again and written then.
type jsonlFile struct {
	path string
	f    *os.File
	// index is the set of units with a line, by where each line starts.
	index unitIndex
	// lineBuf is reused by keyAt to read a line back.
	lineBuf []byte
	// rewrites counts whole-file rewrites, which tests keep few.
	rewrites int
	// lines appends to the file's line index (see openCompletions); nil
	// for a file without one, and after a write to the index failed.
	lines *lineindex.Writer
	// log says when the line index cannot be written; nil for none.
	log *slog.Logger
	// read counts the lines read and checked one by one when the file
	// was opened; the others came from its line index.
	read int
}

// openJSONL opens path for appending, creating it if needed. A last line
// without its newline is the trace of a crash in the middle of a write: it
// is cut off (its message was never acknowledged, so it comes again). Every
// complete line's unit is loaded so that redelivered messages are skipped.
// onLine, if not nil, sees each complete line.
func openJSONL(path string, onLine lineFunc) (*jsonlFile, error) {
	return openIndexed(path, onLine, nil)
}

// lineFunc sees each complete line of a file being opened, with the key
// of its unit.
type lineFunc func(key string, line []byte) error

// openIndexed is openJSONL with the index's hash function (nil: its own);
// tests give a tiny one to force collisions.
func openIndexed(path string, onLine lineFunc, hash func(string) uint64) (*jsonlFile, error) {
	j, err := create(path, hash, 0)
	if err != nil {
		return nil, err
	}
	good, err := j.load(0, 0, func(line []byte, _, _ int64) (string, error) {
		key, err := lineKey(line)
		if err == nil && onLine != nil {
			err = onLine(key, line)
		}
		return key, err
	})
	if err != nil {
		j.f.Close()
		return nil, err
	}
	if _, err := j.repair(good); err != nil {
		j.f.Close()
		return nil, err
	}
	return j, nil
}

// create opens path, creating it if needed, with an empty index hashing
// with hash (nil: its own) sized for units lines (0: grown as lines
// come).
func create(path string, hash func(string) uint64, units int) (*jsonlFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fsmode.File)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	j := &jsonlFile{path: path, f: f, index: unitIndex{hash: hash}}
	j.index.reserve(units)
	return j, nil
}

// repair cuts the file back to good, the end of its last complete line,
// when a torn line follows, and leaves it positioned there for appends.
// It reports whether it cut.
func (j *jsonlFile) repair(good int64) (bool, error) {
	st, err := j.f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", j.path, err)
	}
	cut := st.Size() > good
	if cut {
		if err := j.f.Truncate(good); err != nil {
			return false, fmt.Errorf("repair %s: cut torn last line at byte %d: %w", j.path, good, err)
		}
		if err := j.f.Sync(); err != nil {
			return false, fmt.Errorf("repair %s: %w", j.path, err)
		}
	}
	if _, err := j.f.Seek(good, io.SeekStart); err != nil {
		return false, fmt.Errorf("seek %s: %w", j.path, err)
	}
	return cut, nil
}

// load reads every complete line after the first lines ones, which end
// at byte start, and returns the offset just past the last one. check
// checks a line and returns its unit's key; it is told where the line
// starts and where the next one does.
func (j *jsonlFile) load(start int64, lines int, check func(line []byte, off, next int64) (string, error)) (int64, error) {
	if _, err := j.f.Seek(start, io.SeekStart); err != nil {
		return 0, fmt.Errorf("seek %s: %w", j.path, err)
	}
	lr := dataset.NewLineReader(j.f, dataset.MaxLineBytes)
	lr.Resume(lines, start)
	off := start
	for {
		line, ended, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) || (err == nil && !ended) {
			return off, nil // a last line without its newline is a torn write
		}
		if err != nil {
			return 0, fmt.Errorf("read %s after line %d: %w", j.path, lr.Line(), err)
		}
		if tooLong {
			return 0, fmt.Errorf("%s:%d: line longer than %d MiB, not an aerie output line: move the file aside or repair that line, then start again", j.path, lr.Line(), dataset.MaxLineBytes>>20)
		}
		j.read++
		key, err := check(line, off, lr.Offset())
		if err != nil {
			return 0, fmt.Errorf("%s:%d: not an aerie output line (%v): move the file aside or repair that line, then start again", j.path, lr.Line(), err)
		}
		// A unit's second line (a file put together by hand) is not
		// indexed: the unit counts once, as it did when it was written.
		if err := j.addOnce(key, off); err != nil {
			return 0, fmt.Errorf("%s:%d: %w", j.path, lr.Line(), err)
		}
		off = lr.Offset()
	}
}

// addOnce indexes the line of key that starts at off, unless the unit
// has a line already.
func (j *jsonlFile) addOnce(key string, off int64) error {
	seen, err := j.has(key)
	if err != nil || seen {
		return err
	}
	return j.index.add(key, off)
}

// lineKey returns the key (schema.Unit.Key) of an output line: its unit
// as dataset.LineUnit reads it. The whole line must be JSON, so that a
// line garbled after its unit is not taken for one of aerie's.
func lineKey(line []byte) (string, error) {
	if !json.Valid(line) {
		var v json.RawMessage
		if err := json.Unmarshal(line, &v); err != nil {
			return "", err
		}
		return "", errors.New("not valid JSON")
	}
	return unitKey(line)
}

// unitKey is lineKey without the check that the whole line is JSON.
func unitKey(line []byte) (string, error) {
	u, _, err := dataset.LineUnit(line)
	if err != nil {
		return "", err
	}
	return u.Key(), nil
}

// unitOfKey is the unit whose key (schema.Unit.Key) is key.
func unitOfKey(key string) schema.Unit {
	id, sample, found := strings.Cut(key, "\x00")
	if !found {
		return schema.Unit{ID: key}
	}
	n, _ := strconv.Atoi(sample)
	return schema.Unit{ID: id, Sample: n}
}

// has reports whether the line of the unit with key is on disk. It
// fails only when a candidate line cannot be read back (see unitIndex).
func (j *jsonlFile) has(key string) (bool, error) {
	return j.index.find(key, func(off int64) (string, error) { return keyAt(j.f, j.path, off, &j.lineBuf) })
}

// count is the number of units with a line on disk.
func (j *jsonlFile) count() int { return j.index.len() }

// keyAt reads back the key of the line of f that starts at off, reading
// no further than its end; buf is a buffer to reuse.
func keyAt(f *os.File, path string, off int64, buf *[]byte) (string, error) {
	b := (*buf)[:0]
	if cap(b) > 1<<20 {
		b = nil // do not pin the memory of one long line
	}
	chunk := 4 << 10
	for {
		n := len(b)
		b = slices.Grow(b, chunk)[:n+chunk]
		got, err := f.ReadAt(b[n:], off+int64(n))
		b = b[:n+got]
		if i := bytes.IndexByte(b[n:], '\n'); i >= 0 {
			b = b[:n+i]
			break
		}
		if err != nil || len(b) > dataset.MaxLineBytes+1 {
			if err == nil || errors.Is(err, io.EOF) {
				err = errors.New("no line ends there")
			}
			return "", fmt.Errorf("read back the line at byte %d of %s: %w", off, path, err)
		}
		chunk = min(2*chunk, 1<<20)
	}
	*buf = b
	u, _, err := dataset.LineUnit(bytes.TrimSuffix(b, []byte("\r")))
	if err != nil {
		return "", fmt.Errorf("read back the line at byte %d of %s: %w", off, path, err)
	}
	return u.Key(), nil
}

// appendLines writes lines (each ending in '\n') and fsyncs. Only when it
// returns nil are their units (keys) recorded as written. On error the
// file is cut back to where it was, so a failed write leaves no partial
// line. sums are the lines' summaries for the file's line index, if it
// has one (see openCompletions); they are placed here.
func (j *jsonlFile) appendLines(buf *bytes.Buffer, keys []string, sums []lineindex.Summary) error {
	if buf.Len() == 0 {
		return nil
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != len(keys) {
		return fmt.Errorf("append to %s: %d lines for %d units", j.path, n, len(keys))
	}
	if int64(j.index.len()+len(keys)) > maxIndexLines {
		return fmt.Errorf("append to %s: %w", j.path, errIndexFull)
	}
	start, err := j.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("append to %s: %w", j.path, err)
	}
	_, err = j.f.Write(buf.Bytes())
	if err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		// Best effort: drop what may have been half written.
		_ = j.f.Truncate(start)
		_, _ = j.f.Seek(start, io.SeekStart)
		return fmt.Errorf("append to %s: %w", j.path, err)
	}
	off := start
	rest := buf.Bytes()
	for i, key := range keys {
		if err := j.index.add(key, off); err != nil {
			return fmt.Errorf("append to %s: %w", j.path, err) // not reached: checked above
		}
		n := bytes.IndexByte(rest, '\n') + 1
		if j.lines != nil && i < len(sums) {
			lineindex.Place(&sums[i], off, rest[:n])
		}
		off += int64(n)
		rest = rest[n:]
	}
	if j.lines != nil {
		j.indexLines(sums, off)
	}
	return nil
}

func (j *jsonlFile) Close() error {
	if j.lines != nil {
		j.lines.Close()
	}
	return j.f.Close()
}

// rewrite writes the file anew without the lines of the units (keys) in
// drop, and with the line of each unit in replace swapped for the given
// one (which ends in '\n'). The new file is written beside the old one,
// fsynced and renamed over it, so a crash leaves one or the other whole.
// It is O(file): callers batch their changes.
func (j *jsonlFile) rewrite(drop map[string]bool, replace map[string][]byte) error {
	j.dropLineIndex() // its offsets would no longer hold
	if len(drop) == 0 && len(replace) == 0 {
		return nil
	}
	j.rewrites++
	if _, err := j.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewrite %s: %w", j.path, err)
	}
	// The new file takes the old one's mode: a rewrite leaves the
	// permissions as the umask, or the file's owner, set them.
	tmp, err := fsmode.CreateTemp(j.path, filepath.Base(j.path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", j.path, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	fail := func(err error) error {
		tmp.Close()
		_, _ = j.f.Seek(0, io.SeekEnd)
		return fmt.Errorf("rewrite %s: %w", j.path, err)
	}
	lr := dataset.NewLineReader(j.f, dataset.MaxLineBytes)
	w := bufio.NewWriterSize(tmp, 1<<20)
	// The new file's index, built as it is written: a candidate is read
	// back from the new file once what is buffered is written.
	index := unitIndex{hash: j.index.hash}
	var tmpBuf []byte
	tmpKeyAt := func(off int64) (string, error) {
		if err := w.Flush(); err != nil {
			return "", err
		}
		return keyAt(tmp, tmp.Name(), off, &tmpBuf)
	}
	var written int64
	for {
		line, ended, _, err := lr.Next()
		if err != nil || !ended {
			if err != nil && !errors.Is(err, io.EOF) {
				return fail(err)
			}
			break // a torn last line is left out; load cut it off already
		}
		key, _ := lineKey(line) // load has checked every line
		if repl, ok := replace[key]; ok {
			line = bytes.TrimSuffix(repl, []byte("\n"))
		}
		if !drop[key] {
			if seen, err := index.find(key, tmpKeyAt); err != nil {
				return fail(err)
			} else if !seen {
				if err := index.add(key, written); err != nil {
					return fail(err)
				}
			}
			_, werr := w.Write(line)
			if werr == nil {
				werr = w.WriteByte('\n')
			}
			if werr != nil {
				return fail(werr)
			}
			written += int64(len(line)) + 1
		}
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		return fail(err)
	}
	syncDir(filepath.Dir(j.path))
	j.f.Close()
	j.f = tmp
	if _, err := j.f.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("rewrite %s: %w", j.path, err)
	}
	j.index = index
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

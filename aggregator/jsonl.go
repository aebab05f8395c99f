package aggregator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aerie-dev/aerie/dataset"
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
	keys map[string]struct{}
	// rewrites counts whole-file rewrites, which tests keep few.
	rewrites int
}

// openJSONL opens path for appending, creating it if needed. A last line
// without its newline is the trace of a crash in the middle of a write: it
// is cut off (its message was never acknowledged, so it comes again). Every
// complete line's unit is loaded so that redelivered messages are skipped.
// onLine, if not nil, sees each complete line.
func openJSONL(path string, onLine func(line []byte) error) (*jsonlFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fsmode.File)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	j := &jsonlFile{path: path, f: f, keys: make(map[string]struct{})}
	good, err := j.load(onLine)
	if err != nil {
		f.Close()
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size() > good {
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, fmt.Errorf("repair %s: cut torn last line at byte %d: %w", path, good, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("repair %s: %w", path, err)
		}
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seek %s: %w", path, err)
	}
	return j, nil
}

// load reads every complete line and returns the offset just past the last
// one.
func (j *jsonlFile) load(onLine func([]byte) error) (int64, error) {
	lr := dataset.NewLineReader(j.f, dataset.MaxLineBytes)
	var off int64
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
		key, err := lineKey(line)
		if err != nil {
			return 0, fmt.Errorf("%s:%d: not an aerie output line (%v): move the file aside or repair that line, then start again", j.path, lr.Line(), err)
		}
		j.keys[key] = struct{}{}
		if onLine != nil {
			if err := onLine(line); err != nil {
				return 0, fmt.Errorf("%s:%d: %w", j.path, lr.Line(), err)
			}
		}
		off = lr.Offset()
	}
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

// has reports whether the line of the unit with key is on disk.
func (j *jsonlFile) has(key string) bool {
	_, ok := j.keys[key]
	return ok
}

// count is the number of lines on disk.
func (j *jsonlFile) count() int { return len(j.keys) }

// appendLines writes lines (each ending in '\n') and fsyncs. Only when it
// returns nil are their units (keys) recorded as written. On error the
// file is cut back to where it was, so a failed write leaves no partial
// line.
func (j *jsonlFile) appendLines(buf *bytes.Buffer, keys []string) error {
	if buf.Len() == 0 {
		return nil
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
	for _, key := range keys {
		j.keys[key] = struct{}{}
	}
	return nil
}

func (j *jsonlFile) Close() error { return j.f.Close() }

// rewrite writes the file anew without the lines of the units (keys) in
// drop, and with the line of each unit in replace swapped for the given
// one (which ends in '\n'). The new file is written beside the old one,
// fsynced and renamed over it, so a crash leaves one or the other whole.
// It is O(file): callers batch their changes.
func (j *jsonlFile) rewrite(drop map[string]bool, replace map[string][]byte) error {
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
			_, werr := w.Write(line)
			if werr == nil {
				werr = w.WriteByte('\n')
			}
			if werr != nil {
				return fail(werr)
			}
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
	for key := range drop {
		delete(j.keys, key)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

package requeue

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// idSet is a set of prompt ids.
type idSet map[string]struct{}

func (s idSet) has(id string) bool {
	_, ok := s[id]
	return ok
}

// outputIDs reads the ids of an aggregator output file (completions.jsonl
// or failed.jsonl), decoding nothing but the "id" of each line. A file
// that does not exist has no ids (found is false): the aggregator has not
// written to it yet. A last line with no newline is a write the aggregator
// was interrupted in; like the aggregator, this ignores it.
func outputIDs(path string) (ids idSet, found bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return idSet{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	ids = idSet{}
	lr := newLineReader(f)
	for {
		data, ended, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			return ids, true, nil
		}
		if err != nil {
			return nil, true, fmt.Errorf("read %s after line %d: %w", path, lr.line, err)
		}
		if !ended {
			return ids, true, nil
		}
		if tooLong {
			return nil, true, fmt.Errorf("%s:%d: line longer than %d MiB: this is not an aerie output file; check --data-dir", path, lr.line, maxLineBytes>>20)
		}
		id, err := lineID(data)
		if err != nil {
			return nil, true, fmt.Errorf("%s:%d: not an aerie output line (%v): check --data-dir, or repair or remove that line", path, lr.line, err)
		}
		ids[id] = struct{}{}
	}
}

package requeue

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/aerie-dev/aerie/dataset"
)

// idSet is a set of strings: prompt ids, unit keys (schema.Unit.Key) or
// subject tokens.
type idSet map[string]struct{}

func (s idSet) has(id string) bool {
	_, ok := s[id]
	return ok
}

// outputUnits reads the units of an aggregator output file
// (completions.jsonl or failed.jsonl) as their keys (schema.Unit.Key),
// decoding nothing but the "id" and "sample" of each line; a line without
// a sample is sample 0, as the aggregator reads it. A file that does not
// exist has no units (found is false): the aggregator has not written to
// it yet. A last line with no newline is a write the aggregator was
// interrupted in; like the aggregator, this ignores it.
func outputUnits(path string) (keys idSet, found bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return idSet{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	keys = idSet{}
	lr := dataset.NewLineReader(f, dataset.MaxLineBytes)
	for {
		data, ended, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return keys, true, nil
		}
		if err != nil {
			return nil, true, fmt.Errorf("read %s after line %d: %w", path, lr.Line(), err)
		}
		if !ended {
			return keys, true, nil
		}
		if tooLong {
			return nil, true, fmt.Errorf("%s:%d: line longer than %d MiB: this is not an aerie output file; check --data-dir", path, lr.Line(), dataset.MaxLineBytes>>20)
		}
		u, _, err := dataset.LineUnit(data)
		if err != nil {
			return nil, true, fmt.Errorf("%s:%d: not an aerie output line (%v): check --data-dir, or repair or remove that line", path, lr.Line(), err)
		}
		keys[u.Key()] = struct{}{}
	}
}

package requeue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// selection names the dead letters of one prompt id: every sample's, or,
// when one is set, only those of sample.
type selection struct {
	id     string
	sample int
	one    bool
}

// key is the selection as one string: the id for every sample, the
// unit's key with a marker otherwise, so that the two never collide.
func (s selection) key() string {
	if !s.one {
		return s.id
	}
	return "\x00" + schema.Unit{ID: s.id, Sample: s.sample}.Key()
}

// String names the selection for a report: the id quoted, and its sample
// when it selects one.
func (s selection) String() string {
	if !s.one {
		return strconv.Quote(dataset.Truncate(s.id, 60))
	}
	return strconv.Quote(dataset.Truncate(s.id, 60)) + " sample " + strconv.Itoa(s.sample)
}

// readIDs reads a file selecting units by prompt id, one per line, each
// line being
//
//   - a JSON object with an "id" (so failed.jsonl itself, or a filtered
//     copy of it, can be given): with a "sample" too, as failed.jsonl
//     lines have, it selects that sample only; without, every sample;
//   - a JSON string, or
//   - the id itself, as plain text without surrounding blanks,
//
// which select every sample of the id. Blank lines are skipped. The
// selections are returned in file order, without repeats.
func readIDs(path string) ([]selection, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ids file: %w", err)
	}
	defer f.Close()
	var out []selection
	seen := make(map[string]struct{})
	lr := dataset.NewLineReader(f, dataset.MaxLineBytes)
	for {
		data, _, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s after line %d: %w", path, lr.Line(), err)
		}
		if tooLong {
			return nil, fmt.Errorf("%s:%d: line longer than %d MiB: give one id per line", path, lr.Line(), dataset.MaxLineBytes>>20)
		}
		sel, err := parseIDLine(bytes.TrimSpace(data))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v: give one id per line, as plain text, a JSON string or a JSON object with \"id\" (and \"sample\" to select one sample)", path, lr.Line(), err)
		}
		if sel.id == "" {
			continue
		}
		if _, dup := seen[sel.key()]; !dup {
			seen[sel.key()] = struct{}{}
			out = append(out, sel)
		}
	}
}

// parseIDLine reads the selection of one trimmed line of an ids file; an
// empty id for a blank line.
func parseIDLine(line []byte) (selection, error) {
	switch {
	case len(line) == 0:
		return selection{}, nil
	case line[0] == '{':
		u, one, err := dataset.LineUnit(line)
		return selection{id: u.ID, sample: u.Sample, one: one}, err
	case line[0] == '"':
		id, err := dataset.ParseID(line)
		return selection{id: id}, err
	}
	return selection{id: string(line)}, nil
}

// unitName names a unit for a report: its id quoted, and its sample when
// it is not 0.
func unitName(u schema.Unit) string {
	s := strconv.Quote(dataset.Truncate(u.ID, 60))
	if u.Sample != 0 {
		s += " sample " + strconv.Itoa(u.Sample)
	}
	return s
}

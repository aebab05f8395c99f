package requeue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// readIDs reads a file of prompt ids, one per line, each line being
//
//   - a JSON object with an "id" (so failed.jsonl itself, or a filtered
//     copy of it, can be given),
//   - a JSON string, or
//   - the id itself, as plain text without surrounding blanks.
//
// Blank lines are skipped. The ids are returned in file order, without
// repeats.
func readIDs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ids file: %w", err)
	}
	defer f.Close()
	var ids []string
	seen := make(map[string]struct{})
	lr := newLineReader(f)
	for {
		data, _, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			return ids, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s after line %d: %w", path, lr.line, err)
		}
		if tooLong {
			return nil, fmt.Errorf("%s:%d: line longer than %d MiB: give one id per line", path, lr.line, maxLineBytes>>20)
		}
		id, err := parseIDLine(bytes.TrimSpace(data))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v: give one id per line, as plain text, a JSON string or a JSON object with \"id\"", path, lr.line, err)
		}
		if id == "" {
			continue
		}
		if _, dup := seen[id]; !dup {
			seen[id] = struct{}{}
			ids = append(ids, id)
		}
	}
}

// parseIDLine reads the id of one trimmed line of an ids file; "" for a
// blank line.
func parseIDLine(line []byte) (string, error) {
	switch {
	case len(line) == 0:
		return "", nil
	case line[0] == '{':
		return lineID(line)
	case line[0] == '"':
		return idText(line)
	}
	return string(line), nil
}

package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/aerie-dev/aerie/producer"
)

// Outcome is what the output files hold, checked against the input.
type Outcome struct {
	// Prompts is the number of distinct ids in the input.
	Prompts int
	// Completed and Failed are the distinct ids in completions.jsonl and
	// failed.jsonl; Truncated counts completions cut at max_tokens.
	Completed, Failed, Truncated int
	// FailedByReason counts failed.jsonl's lines by their reason.
	FailedByReason map[string]int
	// Duplicates lists ids written more than once to the same file,
	// InBoth ids present in both files, Missing input ids in neither,
	// Unknown output ids that are not in the input.
	Duplicates, InBoth, Missing, Unknown []string
	// Unparseable lists, as "file:line: why", lines that are not a JSON
	// object with an id, including a last line without its newline.
	Unparseable []string
	// Unreplayable lists ids in failed.jsonl that have neither a dead
	// letter in AERIE_DEAD (from which `aerie replay` works) nor a
	// result; nil when not checked (see Report.State).
	Unreplayable []string
	// AnsweredNotWritten lists input ids whose answer is stored in
	// AERIE_RESULTS but that are not in completions.jsonl: an answer the
	// aggregator finished without writing. Nil when not checked.
	AnsweredNotWritten []string

	failedIDs []string        // every id of failed.jsonl, sorted
	completed map[string]bool // every id of completions.jsonl
}

// OK reports whether every input id is in exactly one file, once, and
// every failed one can be replayed.
func (o *Outcome) OK() bool {
	return len(o.Duplicates)+len(o.InBoth)+len(o.Missing)+len(o.Unknown)+len(o.Unparseable)+len(o.Unreplayable)+len(o.AnsweredNotWritten) == 0
}

// inputIDs reads the ids of a prompts file the way produce does.
func inputIDs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []string
	r := bufio.NewReaderSize(f, 1<<20)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			id, _, perr := producer.ParseLine(line)
			if perr != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, perr)
			}
			ids = append(ids, id)
		}
		if err == io.EOF {
			return ids, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// outputLine is what the check reads of a line of either file.
type outputLine struct {
	ID           *string `json:"id"`
	FinishReason string  `json:"finish_reason"`
	Truncated    bool    `json:"truncated"`
	Reason       string  `json:"reason"`
}

// readOutput returns every line of an output file, with the problems of
// those that are not output lines. A missing file has no lines.
func readOutput(path string) (lines []outputLine, bad []string, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for n := 1; ; n++ {
		b, err := r.ReadBytes('\n')
		if err == io.EOF {
			if len(b) > 0 {
				bad = append(bad, fmt.Sprintf("%s:%d: last line has no newline (torn write): %.80q", path, n, b))
			}
			return lines, bad, nil
		}
		if err != nil {
			return nil, nil, err
		}
		var l outputLine
		if jerr := json.Unmarshal(b, &l); jerr != nil {
			bad = append(bad, fmt.Sprintf("%s:%d: not JSON: %v: %.80q", path, n, jerr, b))
			continue
		}
		if l.ID == nil || *l.ID == "" {
			bad = append(bad, fmt.Sprintf("%s:%d: no id: %.80q", path, n, b))
			continue
		}
		lines = append(lines, l)
	}
}

// verify checks the two output files against the input ids.
func verify(input []string, completionsPath, failedPath string) (*Outcome, error) {
	o := &Outcome{FailedByReason: map[string]int{}}
	want := make(map[string]bool, len(input))
	for _, id := range input {
		want[id] = true
	}
	o.Prompts = len(want)

	completions, bad, err := readOutput(completionsPath)
	if err != nil {
		return nil, err
	}
	o.Unparseable = append(o.Unparseable, bad...)
	failed, bad, err := readOutput(failedPath)
	if err != nil {
		return nil, err
	}
	o.Unparseable = append(o.Unparseable, bad...)

	done := map[string]int{}
	for _, l := range completions {
		done[*l.ID]++
		if done[*l.ID] == 1 && (l.Truncated || l.FinishReason == "length") {
			o.Truncated++
		}
	}
	dead := map[string]int{}
	for _, l := range failed {
		dead[*l.ID]++
		if dead[*l.ID] == 1 {
			o.FailedByReason[l.Reason]++
		}
	}
	o.Completed, o.Failed = len(done), len(dead)
	o.completed = make(map[string]bool, len(done))
	for id := range done {
		o.completed[id] = true
	}
	for id, n := range done {
		if n > 1 {
			o.Duplicates = append(o.Duplicates, fmt.Sprintf("%s (%d times in completions.jsonl)", id, n))
		}
		if dead[id] > 0 {
			o.InBoth = append(o.InBoth, id)
		}
		if !want[id] {
			o.Unknown = append(o.Unknown, id)
		}
	}
	for id, n := range dead {
		o.failedIDs = append(o.failedIDs, id)
		if n > 1 {
			o.Duplicates = append(o.Duplicates, fmt.Sprintf("%s (%d times in failed.jsonl)", id, n))
		}
		if !want[id] {
			o.Unknown = append(o.Unknown, id)
		}
	}
	for id := range want {
		if done[id] == 0 && dead[id] == 0 {
			o.Missing = append(o.Missing, id)
		}
	}
	for _, s := range [][]string{o.Duplicates, o.InBoth, o.Missing, o.Unknown, o.failedIDs} {
		sort.Strings(s)
	}
	return o, nil
}

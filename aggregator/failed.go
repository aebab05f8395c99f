package aggregator

import (
	"bytes"
	"encoding/json"
	"time"
)

// failedFile is failed.jsonl: one line per unit (prompt and sample) that
// failed for good, keyed like every output line (see jsonlFile). Unlike
// completions.jsonl, its lines can change: a unit queued again (`aerie
// replay`) is no longer failed and leaves it, one that completed after
// all leaves it too, and a newer failure of a unit replaces the line of
// the older one.
type failedFile struct {
	*jsonlFile
	// failedAt is each line's failed_at, to tell a newer failure from a
	// dead letter delivered again. Its keys are the units with a line:
	// failed units are few, so they are kept by key, and have no file
	// read back to tell whether a unit has a line.
	failedAt map[string]time.Time
	// requests is how many of the run's requests (turns) each line
	// accounts for in the throughput estimate, to take back as many when
	// the line goes.
	requests map[string]int
	// completed holds the lines of units that have completed since: they
	// no longer count, and leave the file at the next flush. Removing them
	// in batches keeps a large replay linear in the size of the file; a
	// crash before the flush is mended when the file is opened again,
	// since the completion is on disk.
	completed map[string]bool
	// reasons is each line's reason class (schema.Reason*), to count the
	// failures by reason (byReason).
	reasons map[string]string
}

// failedHead is what failedFile reads of each line: its failure time and
// the roles of its messages (see requestsOf).
type failedHead struct {
	FailedAt time.Time  `json:"failed_at"`
	Reason   string     `json:"reason"`
	Messages []turnHead `json:"messages"`
}

// openFailed opens failed.jsonl; onLine, if not nil, is called for each
// line already in it, and returns the requests the line accounts for.
func openFailed(path string, onLine func(failedHead) int) (*failedFile, error) {
	f := &failedFile{failedAt: map[string]time.Time{}, requests: map[string]int{}, completed: map[string]bool{}, reasons: map[string]string{}}
	var err error
	f.jsonlFile, err = openJSONL(path, func(key string, line []byte) error {
		var l failedHead
		_ = json.Unmarshal(line, &l) // a line without them is still a failure
		f.failedAt[key] = l.FailedAt
		f.reasons[key] = l.Reason
		f.requests[key] = 1
		if onLine != nil {
			f.requests[key] = onLine(l)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// final reports whether the unit with key is failed for good: it has a
// line that is not on its way out.
func (f *failedFile) final(key string) bool {
	_, ok := f.failedAt[key]
	return ok && !f.completed[key]
}

// count is the number of units failed for good.
func (f *failedFile) count() int { return f.jsonlFile.count() - len(f.completed) }

// byReason counts the units failed for good by their reason class; nil
// when there are none. A line without a reason counts as "unknown".
func (f *failedFile) byReason() map[string]int {
	var n map[string]int
	for key, reason := range f.reasons {
		if !f.final(key) {
			continue
		}
		if n == nil {
			n = map[string]int{}
		}
		if reason == "" {
			reason = "unknown"
		}
		n[reason]++
	}
	return n
}

// reasonOf is the reason class of a failed line.
func reasonOf(line []byte) string {
	var l failedHead
	_ = json.Unmarshal(line, &l) // a line without one counts as unknown
	return l.Reason
}

// markCompleted says that the unit with key, which may have a line, has
// completed: the line no longer counts and goes at the next flush. It
// returns the requests the line accounted for (0 without a line).
func (f *failedFile) markCompleted(key string) int {
	if !f.final(key) {
		return 0
	}
	f.completed[key] = true
	return f.requests[key]
}

// newer reports whether a failure of the unit with key at at is newer
// than its line.
func (f *failedFile) newer(key string, at time.Time) bool {
	return at.After(f.failedAt[key])
}

// appendLines writes new lines and records when each failed and how many
// requests it accounts for.
func (f *failedFile) appendLines(buf *bytes.Buffer, keys []string, at []time.Time, requests []int) error {
	lines := bytes.SplitAfter(buf.Bytes(), []byte("\n")) // one per key, in order, before buf is written
	reasons := make([]string, len(keys))
	for i := range keys {
		if i < len(lines) {
			reasons[i] = reasonOf(lines[i])
		}
	}
	if err := f.jsonlFile.appendLines(buf, keys, nil); err != nil {
		return err
	}
	for i, key := range keys {
		f.failedAt[key], f.requests[key], f.reasons[key] = at[i], requests[i], reasons[i]
	}
	return nil
}

// change rewrites the file once: without the lines of drop and of the
// units completed since the last flush, and with the lines of replace
// swapped for newer failures (failed at the times in at, accounting for
// the requests in requests).
func (f *failedFile) change(drop map[string]bool, replace map[string][]byte, at map[string]time.Time, requests map[string]int) error {
	all := drop
	if len(f.completed) > 0 {
		all = make(map[string]bool, len(drop)+len(f.completed))
		for key := range drop {
			all[key] = true
		}
		for key := range f.completed {
			all[key] = true
		}
	}
	if err := f.rewrite(all, replace); err != nil {
		return err
	}
	for key := range all {
		delete(f.failedAt, key)
		delete(f.requests, key)
		delete(f.completed, key)
		delete(f.reasons, key)
	}
	for key, line := range replace {
		f.reasons[key] = reasonOf(line)
	}
	for key, t := range at {
		f.failedAt[key] = t
	}
	for key, n := range requests {
		f.requests[key] = n
	}
	return nil
}

// flush removes the lines of units completed since the last flush.
func (f *failedFile) flush() error {
	if len(f.completed) == 0 {
		return nil
	}
	return f.change(nil, nil, nil, nil)
}

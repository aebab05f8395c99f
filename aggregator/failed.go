package aggregator

import (
	"bytes"
	"encoding/json"
	"time"
)

// failedFile is failed.jsonl: one line per prompt that failed for good.
// Unlike completions.jsonl, its lines can change: a prompt queued again
// (`aerie replay`) is no longer failed and leaves it, one that completed
// after all leaves it too, and a newer failure of a prompt replaces the
// line of the older one.
type failedFile struct {
	*jsonlFile
	// failedAt is each line's failed_at, to tell a newer failure from a
	// dead letter delivered again.
	failedAt map[string]time.Time
	// completed holds the lines of prompts that have completed since: they
	// no longer count, and leave the file at the next flush. Removing them
	// in batches keeps a large replay linear in the size of the file; a
	// crash before the flush is mended when the file is opened again,
	// since the completion is on disk.
	completed map[string]bool
}

// openFailed opens failed.jsonl; onLine, if not nil, is called for each
// line already in it.
func openFailed(path string, onLine func()) (*failedFile, error) {
	f := &failedFile{failedAt: map[string]time.Time{}, completed: map[string]bool{}}
	var err error
	f.jsonlFile, err = openJSONL(path, func(line []byte) error {
		var l struct {
			ID       string    `json:"id"`
			FailedAt time.Time `json:"failed_at"`
		}
		_ = json.Unmarshal(line, &l) // openJSONL has checked the id
		f.failedAt[l.ID] = l.FailedAt
		if onLine != nil {
			onLine()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// final reports whether id is failed for good: it has a line that is not
// on its way out.
func (f *failedFile) final(id string) bool { return f.has(id) && !f.completed[id] }

// count is the number of prompts failed for good.
func (f *failedFile) count() int { return f.jsonlFile.count() - len(f.completed) }

// markCompleted says that id, which may have a line, has completed: the
// line no longer counts and goes at the next flush.
func (f *failedFile) markCompleted(id string) {
	if f.has(id) {
		f.completed[id] = true
	}
}

// newer reports whether a failure of id at at is newer than its line.
func (f *failedFile) newer(id string, at time.Time) bool {
	return at.After(f.failedAt[id])
}

// appendLines writes new lines and records when each failed.
func (f *failedFile) appendLines(buf *bytes.Buffer, ids []string, at []time.Time) error {
	if err := f.jsonlFile.appendLines(buf, ids); err != nil {
		return err
	}
	for i, id := range ids {
		f.failedAt[id] = at[i]
	}
	return nil
}

// change rewrites the file once: without the lines of drop and of the
// prompts completed since the last flush, and with the lines of replace
// swapped for newer failures (failed at the times in at).
func (f *failedFile) change(drop map[string]bool, replace map[string][]byte, at map[string]time.Time) error {
	all := drop
	if len(f.completed) > 0 {
		all = make(map[string]bool, len(drop)+len(f.completed))
		for id := range drop {
			all[id] = true
		}
		for id := range f.completed {
			all[id] = true
		}
	}
	if err := f.rewrite(all, replace); err != nil {
		return err
	}
	for id := range all {
		delete(f.failedAt, id)
		delete(f.completed, id)
	}
	for id, t := range at {
		f.failedAt[id] = t
	}
	return nil
}

// flush removes the lines of prompts completed since the last flush.
func (f *failedFile) flush() error {
	if len(f.completed) == 0 {
		return nil
	}
	return f.change(nil, nil, nil)
}

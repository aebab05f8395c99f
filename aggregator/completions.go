package aggregator

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aerie-dev/aerie/dataset/lineindex"
)

// indexFrameLines bounds the lines of one frame of the line index that a
// full read of completions.jsonl writes.
const indexFrameLines = 4096

// openCompletions opens completions.jsonl as openJSONL does, sized for a
// run of units lines, with its line index (completions.jsonl.index, see
// lineindex): what the index covers, once checked against the file, is
// taken from it without reading the lines, and only the lines after it
// are read and checked one by one. Without an index, or with one that
// disagrees with the file (said in log), every line is read, and a new
// index written. restore, if not nil, sees the summary of every line,
// valid during the call. Each line read must be JSON with the fields a
// summary reads of the types aerie writes: the whole line is decoded
// once, which is its check that it is JSON.
func openCompletions(path string, units int, restore func(*lineindex.Summary), log *slog.Logger) (*jsonlFile, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	j, err := create(path, nil, units)
	if err != nil {
		return nil, err
	}
	j.log = log
	began := time.Now()
	if err := j.openCompletions(restore); err != nil {
		j.Close()
		return nil, err
	}
	log.Info("opened the run's completions", "file", j.path, "lines", j.count(), "read_whole", j.read, "took", time.Since(began).Round(time.Millisecond))
	return j, nil
}

func (j *jsonlFile) openCompletions(restore func(*lineindex.Summary)) error {
	st, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", j.path, err)
	}
	ixPath := lineindex.PathOf(j.path)
	var start int64
	var lines int
	ck, err := lineindex.Check(ixPath, j.f)
	var disagrees *lineindex.Disagreement
	switch {
	case err == nil:
		err = ck.Each(func(s *lineindex.Summary) error {
			if err := j.addOnce(s.Unit().Key(), s.Offset); err != nil {
				return err
			}
			if restore != nil {
				restore(s)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w: move %s aside to read %s whole", err, ixPath, j.path)
		}
		start, lines = ck.End(), ck.Lines()
		j.lines, err = lineindex.Reopen(ixPath, ck.Size())
	case errors.As(err, &disagrees):
		j.log.Warn("the line index disagrees with the file: reading the whole file, and indexing it anew", "file", j.path, "why", disagrees.Why)
		j.lines, err = lineindex.Create(ixPath)
	case errors.Is(err, os.ErrNotExist):
		j.lines, err = lineindex.Create(ixPath)
	default:
		return err
	}
	if err != nil {
		j.log.Warn("cannot write the line index: a restart reads the whole file", "file", j.path, "err", err)
		j.lines = nil
	}
	var frame []lineindex.Summary
	good, err := j.load(start, lines, func(line []byte, off, next int64) (string, error) {
		key, err := unitKey(line)
		if err != nil {
			return "", err
		}
		s, err := lineindex.SummarizeJSON(line)
		if err != nil {
			return "", err
		}
		u := unitOfKey(key)
		s.ID, s.Sample = u.ID, u.Sample
		if restore != nil {
			restore(&s)
		}
		if j.lines != nil {
			lineindex.PlaceRead(&s, off, line, next)
			frame = append(frame, s)
			if len(frame) == indexFrameLines {
				j.appendIndex(frame, next, st.ModTime())
				frame = frame[:0]
			}
		}
		return key, nil
	})
	if err != nil {
		return err
	}
	if len(frame) > 0 {
		j.appendIndex(frame, good, st.ModTime())
	}
	cut, err := j.repair(good)
	if err != nil {
		return err
	}
	if cut && j.lines != nil {
		// The file's time changed with the cut: say so, or the next
		// check takes the file for changed behind the index's back.
		if st, err := j.f.Stat(); err == nil {
			j.appendIndex(nil, good, st.ModTime())
		}
	}
	return nil
}

// indexLines appends to the line index the summaries of lines just
// appended and fsynced, placed, which end at end.
func (j *jsonlFile) indexLines(sums []lineindex.Summary, end int64) {
	st, err := j.f.Stat()
	if err != nil {
		j.lineIndexFailed(err)
		return
	}
	j.appendIndex(sums, end, st.ModTime())
}

func (j *jsonlFile) appendIndex(sums []lineindex.Summary, end int64, modified time.Time) {
	if err := j.lines.Append(sums, end, modified); err != nil {
		j.lineIndexFailed(err)
	}
}

// lineIndexFailed stops writing the line index after an error: it then
// lags the file, and the next start reads the lines after it one by one.
func (j *jsonlFile) lineIndexFailed(err error) {
	j.log.Warn("cannot write the line index, and stop writing it: the next start reads the lines after it whole", "file", j.path, "err", err)
	j.lines.Close()
	j.lines = nil
}

// dropLineIndex removes the file's line index, if it has one.
func (j *jsonlFile) dropLineIndex() {
	if j.lines == nil {
		return
	}
	j.lines.Close()
	j.lines = nil
	if err := os.Remove(lineindex.PathOf(j.path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		j.log.Warn("cannot remove the line index", "file", j.path, "err", err)
	}
}

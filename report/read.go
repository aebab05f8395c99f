package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// maxSkipNotes bounds the unreadable lines a report names one by one;
// the rest are only counted.
const maxSkipNotes = 5

// Skipped counts the lines of one file that could not be read, and names
// the first few.
type Skipped struct {
	File  string
	Lines int
	Notes []string
}

func (s *Skipped) add(line int, why string) {
	s.Lines++
	if len(s.Notes) < maxSkipNotes {
		s.Notes = append(s.Notes, fmt.Sprintf("%s:%d: %s", s.File, line, why))
	}
}

// completions holds what the report needs of completions.jsonl, a few
// numbers a line (about 13 bytes) rather than the lines themselves, so
// that a run of a million answers fits in a few tens of MB.
type completions struct {
	count            int
	tokens           []uint32 // completion tokens, by line
	reason           []uint8  // finish reason, an index into reasons, by line
	reasons          []string
	ttft, latency    []float32 // ms, by line
	promptTokens     int64
	completionTokens int64
	truncated        int
	simulated        int
	byWorker         map[string]int
	first, last      time.Time // finished_at
	// hints measures how well the lines' length hints ranked them.
	hints throughput.HintAccuracy
}

// reasonIndex is the index of a finish reason in c.reasons; past 255
// distinct reasons (no backend has that many) the rest share "other".
func (c *completions) reasonIndex(r string) uint8 {
	if r == "" {
		r = "(none)"
	}
	for i, s := range c.reasons {
		if s == r {
			return uint8(i)
		}
	}
	if len(c.reasons) == 255 {
		r = "other"
		for i, s := range c.reasons {
			if s == r {
				return uint8(i)
			}
		}
		c.reasons[254] = r
		return 254
	}
	c.reasons = append(c.reasons, r)
	return uint8(len(c.reasons) - 1)
}

func (c *completions) add(l *lineindex.Summary) {
	c.count++
	c.tokens = append(c.tokens, uint32(max(l.CompletionTokens, 0)))
	c.reason = append(c.reason, c.reasonIndex(l.FinishReason))
	c.ttft = append(c.ttft, float32(l.TTFTMillis))
	c.latency = append(c.latency, float32(l.LatencyMs))
	c.promptTokens += int64(l.PromptTokens)
	c.completionTokens += int64(l.CompletionTokens)
	if l.IsTruncated() {
		c.truncated++
	}
	c.hints.Add(l.LengthHint, l.CompletionTokens)
	if l.Simulated {
		c.simulated++
	}
	c.byWorker[l.Worker]++
	c.first, c.last = earliest(c.first, l.FinishedAt), latest(c.last, l.FinishedAt)
}

// failures holds what the report needs of failed.jsonl.
type failures struct {
	count    int
	byReason map[string]int
	last     time.Time // failed_at
}

// event is what the report needs of one throughput event.
type event struct {
	at                           time.Time
	phase                        schema.Phase
	requestsPerSec, tokensPerSec float64
	eta, etaLow, etaHigh         float64 // seconds, negative when unknown
	total, completed, failed     int
	// waitingForSlots is the event's Throughput.WaitingForSlots.
	waitingForSlots bool
}

// readLines calls decode with each non-blank line of dir/name, counting
// in skipped the lines it cannot read instead of stopping: a report of a
// damaged file says what it could read and how much it could not. A
// missing file has no lines.
func readLines(dir, name string, skipped *Skipped, decode func([]byte) error) (found bool, err error) {
	*skipped = Skipped{File: name}
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	return true, readFrom(f, 0, 0, skipped, decode)
}

// readFrom is readLines from byte start of f, after its first lines
// lines.
func readFrom(f *os.File, start int64, lines int, skipped *Skipped, decode func([]byte) error) error {
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	lr := dataset.NewLineReader(f, dataset.MaxLineBytes)
	lr.Resume(lines, start)
	for {
		line, ended, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("report: read %s after line %d: %w", f.Name(), lr.Line(), err)
		}
		switch {
		case tooLong:
			skipped.add(lr.Line(), fmt.Sprintf("longer than %d MiB", dataset.MaxLineBytes>>20))
		case len(bytes.TrimSpace(line)) == 0:
		default:
			if err := decode(line); err != nil {
				why := "not JSON of the expected shape"
				if !ended {
					why = "last line cut short (a write in progress or interrupted)"
				}
				skipped.add(lr.Line(), why)
			}
		}
	}
}

// readCompletions reads completions.jsonl: what its line index covers
// from the index, once checked against the file (see lineindex), and the
// lines after it one by one. An index that disagrees with the file is
// said in note, and the whole file read.
func readCompletions(dir string, skipped *Skipped) (c *completions, note string, err error) {
	c = &completions{byWorker: map[string]int{}}
	*skipped = Skipped{File: dataset.CompletionsFile}
	path := filepath.Join(dir, dataset.CompletionsFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	var start int64
	var lines int
	ck, err := lineindex.Check(lineindex.PathOf(path), f)
	var disagrees *lineindex.Disagreement
	switch {
	case err == nil:
		err = ck.Each(func(s *lineindex.Summary) error {
			c.add(s)
			return nil
		})
		if err != nil {
			return nil, "", fmt.Errorf("report: %w", err)
		}
		start, lines = ck.End(), ck.Lines()
	case errors.As(err, &disagrees):
		note = fmt.Sprintf("%s.index disagrees with %s (%s): the report read the whole file instead", dataset.CompletionsFile, dataset.CompletionsFile, disagrees.Why)
	}
	err = readFrom(f, start, lines, skipped, func(b []byte) error {
		s, err := lineindex.SummarizeJSON(b)
		if err != nil {
			return err
		}
		c.add(&s)
		return nil
	})
	return c, note, err
}

func readFailures(dir string, skipped *Skipped) (*failures, error) {
	f := &failures{byReason: map[string]int{}}
	_, err := readLines(dir, dataset.FailedFile, skipped, func(b []byte) error {
		var l dataset.FailedLine
		if err := json.Unmarshal(b, &l); err != nil {
			return err
		}
		if l.ID == "" {
			return errors.New("no id")
		}
		f.count++
		reason := l.Reason
		if reason == "" {
			reason = "(none)"
		}
		f.byReason[reason]++
		f.last = latest(f.last, l.FailedAt)
		return nil
	})
	return f, err
}

func readEvents(dir string, skipped *Skipped) ([]event, error) {
	var evs []event
	_, err := readLines(dir, dataset.EventsFile, skipped, func(b []byte) error {
		var t schema.Throughput
		if err := json.Unmarshal(b, &t); err != nil {
			return err
		}
		if t.Time.IsZero() {
			return errors.New("no time")
		}
		evs = append(evs, event{
			at: t.Time, phase: t.Phase, requestsPerSec: t.RequestsPerSec, tokensPerSec: t.TokensPerSec,
			eta: t.ETASec, etaLow: t.ETALowSec, etaHigh: t.ETAHighSec,
			total: t.Total, completed: t.Completed, failed: t.Failed, waitingForSlots: t.WaitingForSlots,
		})
		return nil
	})
	return evs, err
}

// readManifest reads dir/manifest.json; a missing one is nil with no
// error, an unreadable one nil with why.
func readManifest(dir string) (*schema.Manifest, string) {
	b, err := os.ReadFile(filepath.Join(dir, dataset.ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, dataset.ManifestFile + " is absent (written by aggregators since it exists; the manifest is also in NATS: nats kv get aerie-runs <run>)"
	}
	if err != nil {
		return nil, "cannot read " + dataset.ManifestFile + ": " + err.Error()
	}
	m, err := schema.DecodeManifest(b)
	if err != nil {
		return nil, dataset.ManifestFile + " is not a run manifest: " + err.Error()
	}
	return m, ""
}

func earliest(a, b time.Time) time.Time {
	if b.IsZero() || (!a.IsZero() && a.Before(b)) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

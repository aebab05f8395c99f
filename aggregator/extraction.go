package aggregator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/hfdataset"
	"github.com/aerie-dev/aerie/hiddenstates"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// A hidden-states run's output is what speculators' trainer loads as it
// is: its output directory is a datasets.save_to_disk directory whose
// row idx holds the input_ids and loss_mask of sample idx, beside
// hidden_states/hs_<idx>.safetensors, published by the workers. The
// aggregator writes the dataset once the run is done, from the lines of
// completions.jsonl and failed.jsonl (a failed sample keeps its row: the
// rows after it keep their idx, and the trainer skips a row without a
// file or generates it), and again whenever a replay changes them. It
// then removes what killed workers left in hidden_states/ (copies cut
// short), so that the directory holds one file per sample and nothing
// else.

// answerOf is what the estimator counts of an output line: for a
// hidden-states sample, whose work is reading its input, its input
// tokens as the tokens of one request.
func (a *Aggregator) answerOf(s *lineindex.Summary) throughput.Answer {
	if a.bytesPerToken > 0 {
		return throughput.Answer{Requests: []throughput.Request{{CompletionTokens: s.PromptTokens}}}
	}
	return answerOf(s, a.turnsAll)
}

// extractionOut is the output directory of the hidden-states run m on
// this aggregator: the manifest's, or its run directory.
func (a *Aggregator) extractionOut(m *schema.Manifest) string {
	if a.cfg.Out != "" {
		return a.cfg.Out
	}
	if m.Extraction != nil && m.Extraction.Out != "" {
		return m.Extraction.Out
	}
	return a.dir
}

// finishOutput writes the dataset of a hidden-states run that is done,
// unless it was written for the same outcomes; it reports whether the
// output is complete. Other runs' output needs nothing more.
func (a *Aggregator) finishOutput() bool {
	m := a.manifest.Load()
	if m == nil || m.Task != schema.TaskHiddenStates {
		return true
	}
	a.mu.Lock()
	outcomes := [2]int{a.completions.count(), a.failed.count()}
	a.mu.Unlock()
	if a.datasetFor == outcomes {
		return true
	}
	out := a.extractionOut(m)
	if err := writeExtractionDataset(out, a.total, filepath.Join(a.dir, CompletionsFile), filepath.Join(a.dir, FailedFile)); err != nil {
		a.log.Error("cannot write the run's dataset; trying again at the next event", "dir", out, "err", err)
		return false
	}
	removed := removePartials(filepath.Join(out, schema.HiddenStatesDir))
	a.datasetFor = outcomes
	a.log.Info("wrote the run's dataset beside its hidden states: speculators trains from it as it is",
		"dir", out, "rows", a.total, "files", outcomes[0], "failed", outcomes[1], "partial_copies_removed", removed)
	return true
}

// extractionRow is what the dataset takes of an output line.
type extractionRow struct {
	ID       string  `json:"id"`
	InputIDs []int64 `json:"input_ids"`
	LossMask []int   `json:"loss_mask"`
}

// lineAt is where a sample's line is: which file, at which offset.
type lineAt struct {
	file int8 // 0: none, 1: completions, 2: failed
	off  int64
}

// writeExtractionDataset writes the dataset of total samples to out,
// from their lines in the completions and failed files. Only the offsets
// of the lines are held, eight bytes and a little a sample, and each row
// is read back when it is written.
func writeExtractionDataset(out string, total int, completions, failed string) error {
	at := make([]lineAt, total)
	files := []string{completions, failed}
	opened := make([]*os.File, len(files))
	for i, path := range files {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		defer f.Close()
		opened[i] = f
		if err := indexLines(f, path, int8(i+1), at); err != nil {
			return err
		}
	}
	for idx, a := range at {
		if a.file == 0 {
			return fmt.Errorf("sample %d has no line in %s nor %s", idx, completions, failed)
		}
	}
	buf := make([]byte, 0, 64<<10)
	return hfdataset.Write(out, total, func(i int) (hfdataset.Row, error) {
		f := opened[at[i].file-1]
		line, err := readLineAt(f, at[i].off, &buf)
		if err != nil {
			return hfdataset.Row{}, fmt.Errorf("%s: %w", f.Name(), err)
		}
		var r extractionRow
		if err := json.Unmarshal(line, &r); err != nil {
			return hfdataset.Row{}, fmt.Errorf("%s at byte %d: %w", f.Name(), at[i].off, err)
		}
		return hfdataset.Row{InputIDs: r.InputIDs, LossMask: r.LossMask}, nil
	})
}

// indexLines notes in at where each sample's line of f is. A line of the
// completions file wins over one of the failed file.
func indexLines(f *os.File, path string, which int8, at []lineAt) error {
	lr := dataset.NewLineReader(f, 0)
	var off int64
	for {
		line, ended, _, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		start := off
		off = lr.Offset()
		if !ended || len(line) == 0 {
			continue
		}
		var head struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			continue
		}
		idx, err := schema.SampleIndex(head.ID)
		if err != nil || idx >= len(at) {
			continue
		}
		if at[idx].file == 0 || which == 1 {
			at[idx] = lineAt{file: which, off: start}
		}
	}
}

// readLineAt reads the line of f that starts at off into buf.
func readLineAt(f *os.File, off int64, buf *[]byte) ([]byte, error) {
	lr := dataset.NewLineReader(io.NewSectionReader(f, off, 1<<62), 0)
	line, _, tooLong, err := lr.Next()
	if err != nil {
		return nil, err
	}
	if tooLong {
		return nil, fmt.Errorf("the line at byte %d is too long", off)
	}
	*buf = append((*buf)[:0], line...)
	return *buf, nil
}

// removePartials removes the copies cut short in dir (hiddenstates'
// partial files) and returns how many.
func removePartials(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, hiddenstates.PartialPrefix) && strings.HasSuffix(name, hiddenstates.PartialSuffix) {
			if os.Remove(filepath.Join(dir, name)) == nil {
				n++
			}
		}
	}
	return n
}

// A hidden-states sample's work is reading its input, and its tokens
// are known before it is sent: the run's tokens left are exact, and
// the server reads them at a rate that holds while its batch is full.
// The estimator's model of answers of unknown length, streamed token by
// token, does not fit it (its drain waits on tokens no sample streams:
// 30 to 80% long at half and three quarters of the runs measured), so
// a hidden-states run's ETA is the tokens left over the rate of the
// last quarter minute, its band that over the faster and the slower of
// that rate and the last two minutes' (docs/eta.md).

// tokenPace is the input tokens extracted, as the events saw them.
type tokenPace struct {
	at   []time.Time
	done []int64
}

// paceKeep is how far back tokenPace looks; paceShort the window of the
// rate the ETA takes.
const (
	paceKeep  = 2 * time.Minute
	paceShort = 15 * time.Second
)

// add notes done tokens at now, forgetting what is older than paceKeep
// but the last before it.
func (p *tokenPace) add(now time.Time, done int64) {
	p.at, p.done = append(p.at, now), append(p.done, done)
	k := 0
	for k+1 < len(p.at) && now.Sub(p.at[k+1]) >= paceKeep {
		k++
	}
	p.at, p.done = p.at[k:], p.done[k:]
}

// rate is the tokens a second over the last window (from the last note
// at or before its start), 0 when not known.
func (p *tokenPace) rate(window time.Duration) float64 {
	n := len(p.at)
	if n < 2 {
		return 0
	}
	last := p.at[n-1]
	k := n - 2
	for k > 0 && last.Sub(p.at[k]) < window {
		k--
	}
	d := last.Sub(p.at[k]).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(p.done[n-1]-p.done[k]) / d
}

// extractionETA sets s's ETA and band for a hidden-states run from its
// tokens left and its pace; it leaves the estimator's when the pace is
// not known yet.
func (a *Aggregator) extractionETA(s *schema.Throughput, now time.Time) {
	if a.bytesPerToken == 0 || s.Phase == schema.PhaseDone {
		return
	}
	done := int64(s.MeanCompletionTokens*float64(s.Completed) + 0.5)
	a.pace.add(now, done)
	short, long := a.pace.rate(paceShort), a.pace.rate(paceKeep)
	if short <= 0 || long <= 0 {
		return
	}
	// The failed samples' tokens will not be read.
	left := float64(a.tokensTotal-done) - s.MeanCompletionTokens*float64(s.Failed)
	left = max(left, 0)
	s.ETASec = left / short
	s.ETALowSec = etaLowShare * left / max(short, long)
	s.ETAHighSec = etaHighShare * left / min(short, long)
}

// etaLowShare and etaHighShare widen the band past the spread of the
// two rates, for the rate's own wander within a window.
const (
	etaLowShare  = 0.85
	etaHighShare = 1.2
)

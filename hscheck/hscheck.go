// Package hscheck checks a hidden-states run's output as its trainer
// will read it: the dataset's row idx against the sample's line, the
// file hidden_states/hs_<idx>.safetensors against the result that names
// it (size and SHA-256) and against the row (verified: token ids, shape,
// dtype, every value finite), and nothing else in hidden_states/.
package hscheck

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/hfdataset"
	"github.com/aerie-dev/aerie/hiddenstates"
	"github.com/aerie-dev/aerie/schema"
)

// Report is what a check found. A run whose output a trainer can use as
// it is has every count but Rows, Files and Failed at zero.
type Report struct {
	// Rows is the dataset's rows; Files the verified files named by a
	// result; Failed the samples with a failure line and no file.
	Rows, Files, Failed int
	// Missing counts results whose file is absent; Differs, files that
	// differ from their result (size, checksum) or fail verification;
	// Extra, files in hidden_states/ no result names (partial copies
	// included); RowMismatch, rows whose ids or mask are not their
	// sample's; Unaccounted, samples with neither a result nor a failure.
	Missing, Differs, Extra, RowMismatch, Unaccounted int
	// Problems names the first few.
	Problems []string
}

// OK reports whether the output is whole.
func (r *Report) OK() bool {
	return r.Missing+r.Differs+r.Extra+r.RowMismatch+r.Unaccounted == 0
}

func (r *Report) problem(format string, args ...any) {
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

func (r *Report) String() string {
	s := fmt.Sprintf("%d rows, %d files verified, %d failed; %d missing, %d differ, %d extra, %d rows mismatched, %d unaccounted",
		r.Rows, r.Files, r.Failed, r.Missing, r.Differs, r.Extra, r.RowMismatch, r.Unaccounted)
	if len(r.Problems) > 0 {
		s += ":\n  " + strings.Join(r.Problems, "\n  ")
	}
	return s
}

// Check checks the output in out of run m, whose completions and failed
// files are given. Every file is read whole, once.
func Check(m *schema.Manifest, out, completions, failed string) (*Report, error) {
	x := m.Extraction
	if x == nil {
		return nil, errors.New("not a hidden-states run")
	}
	rep := &Report{}
	done := map[int]*dataset.CompletionLine{}
	if err := readLines(completions, func(f io.Reader) error {
		return dataset.ReadCompletions(f, completions, func(l *dataset.CompletionLine) error {
			if idx, err := schema.SampleIndex(l.ID); err == nil {
				done[idx] = l
			}
			return nil
		})
	}); err != nil {
		return nil, err
	}
	gone := map[int]bool{}
	if err := readLines(failed, func(f io.Reader) error {
		return dataset.ReadFailed(f, failed, func(l *dataset.FailedLine) error {
			if idx, err := schema.SampleIndex(l.ID); err == nil {
				gone[idx] = true
			}
			return nil
		})
	}); err != nil {
		return nil, err
	}
	named := map[string]bool{}
	for idx := range m.Total {
		l := done[idx]
		if l == nil {
			if gone[idx] {
				rep.Failed++
			} else {
				rep.Unaccounted++
				rep.problem("sample %d has neither a result nor a failure", idx)
			}
			continue
		}
		hs := l.HiddenStates
		if hs == nil || hs.Index != idx {
			rep.Differs++
			rep.problem("sample %d's result names no file of its own", idx)
			continue
		}
		named[filepath.Base(hs.File)] = true
		path := filepath.Join(out, filepath.FromSlash(hs.File))
		s, err := hiddenstates.VerifyFile(path, hiddenstates.Want{TokenIDs: l.InputIDs, Layers: len(x.LayerIDs), Hidden: x.HiddenSize, DType: x.DType})
		switch {
		case errors.Is(err, os.ErrNotExist):
			rep.Missing++
			rep.problem("sample %d: %s is missing", idx, hs.File)
		case err != nil:
			rep.Differs++
			rep.problem("sample %d: %s: %v", idx, hs.File, err)
		case s.SHA256 != hs.SHA256 || s.Bytes != hs.Bytes:
			rep.Differs++
			rep.problem("sample %d: %s is not the file its result names (%d bytes, sha256 %s; the result says %d, %s)", idx, hs.File, s.Bytes, s.SHA256[:12], hs.Bytes, hs.SHA256[:min(12, len(hs.SHA256))])
		default:
			rep.Files++
		}
	}
	entries, err := os.ReadDir(filepath.Join(out, schema.HiddenStatesDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if !named[e.Name()] {
			rep.Extra++
			rep.problem("%s/%s is named by no result", schema.HiddenStatesDir, e.Name())
		}
	}
	rd, err := hfdataset.Open(out)
	if err != nil {
		return nil, fmt.Errorf("the run's dataset: %w", err)
	}
	defer rd.Close()
	for {
		row, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the run's dataset: %w", err)
		}
		idx := rd.Rows() - 1
		rep.Rows++
		if l := done[idx]; l != nil && (!slices.Equal(row.InputIDs, l.InputIDs) || !slices.Equal(row.LossMask, l.LossMask)) {
			rep.RowMismatch++
			rep.problem("row %d is not sample %d's input", idx, idx)
		}
	}
	if rep.Rows != m.Total {
		rep.RowMismatch += abs(m.Total - rep.Rows)
		rep.problem("the dataset has %d rows for %d samples", rep.Rows, m.Total)
	}
	return rep, nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// readLines opens path, if it exists, for read.
func readLines(path string, read func(io.Reader) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return read(f)
}

package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/schema"
)

// Source is where an export reads a run's lines: its files, or its
// streams.
type Source interface {
	// Completions calls fn with every completed unit's line, as it
	// stands in completions.jsonl (valid until fn returns). An error of
	// fn that is a badLine is the line's: the Source says where the
	// line is.
	Completions(ctx context.Context, fn func(line []byte) error) error
	// Failed calls fn with every failed unit's line.
	Failed(ctx context.Context, fn func(*FailedLine) error) error
}

// Files is the Source of a run's output directory (<data-dir>/<run>).
// A missing failed.jsonl is an empty one; a missing completions.jsonl is
// an error.
type Files string

// Completions reads completions.jsonl. A last line without its newline
// that cannot be read is the trace of a write cut short, and is left
// out, as the aggregator itself cuts it off.
func (dir Files) Completions(ctx context.Context, fn func([]byte) error) error {
	path := filepath.Join(string(dir), CompletionsFile)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w (is --data-dir right, and has the run's aggregator written it? --from-stream rebuilds it from NATS)", err)
	}
	defer f.Close()
	return readLines(f, path, func(line []byte) error {
		if err := ctx.Err(); err != nil {
			return fnErr{err}
		}
		err := fn(line)
		var bad badLine
		if errors.As(err, &bad) {
			return bad.err // the line's: readLines says where, or leaves out a torn last one
		}
		return fnErr{err}
	})
}

// Failed reads failed.jsonl.
func (dir Files) Failed(ctx context.Context, fn func(*FailedLine) error) error {
	path := filepath.Join(string(dir), FailedFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return ReadFailed(f, path, func(l *FailedLine) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(l)
	})
}

// WriteFileAtomic writes path through write: into a temporary file in
// path's directory, fsynced and renamed over path only when write
// returns nil. An export that fails or is interrupted leaves no file, or
// the one that was there, never half of one.
func WriteFileAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := fsmode.CreateTemp(path, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("create a file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ReadManifest reads a run's manifest.json from its output directory; a
// missing one is nil with no error.
func ReadManifest(dir string) (*schema.Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return schema.DecodeManifest(b)
}

package export

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/dataset"
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
	Failed(ctx context.Context, fn func(*dataset.FailedLine) error) error
}

// Files is the Source of a run's output directory (<data-dir>/<run>).
// A missing failed.jsonl is an empty one; a missing completions.jsonl is
// an error.
type Files string

// Completions reads completions.jsonl. A last line without its newline
// that cannot be read is the trace of a write cut short, and is left
// out, as the aggregator itself cuts it off.
func (dir Files) Completions(ctx context.Context, fn func([]byte) error) error {
	path := filepath.Join(string(dir), dataset.CompletionsFile)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w (is --data-dir right, and has the run's aggregator written it? --from-stream rebuilds it from NATS)", err)
	}
	defer f.Close()
	return dataset.ReadOutputLines(f, path, func(line []byte) error {
		if err := ctx.Err(); err != nil {
			return dataset.CallerError{Err: err}
		}
		err := fn(line)
		var bad badLine
		if errors.As(err, &bad) {
			return bad.err // the line's: readLines says where, or leaves out a torn last one
		}
		return dataset.CallerError{Err: err}
	})
}

// Failed reads failed.jsonl.
func (dir Files) Failed(ctx context.Context, fn func(*dataset.FailedLine) error) error {
	path := filepath.Join(string(dir), dataset.FailedFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return dataset.ReadFailed(f, path, func(l *dataset.FailedLine) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(l)
	})
}

package worker

import (
	"strings"

	"github.com/aerie-dev/aerie/batchstore"
	"github.com/aerie-dev/aerie/schema"
)

// batches are the group commits of a worker's stores: results, and turns
// with --turns all. The prompts this worker holds finish close together,
// and their answers, stored as one atomic batch, share one fsync on the
// server instead of taking one each. Dead letters are rare and go alone.
type batches struct {
	results, turns *batchstore.Store
}

// startBatches starts the group commits of the streams Run opened and
// returns what stops them, once no prompt is being processed.
func (w *Worker) startBatches() (stop func()) {
	opts := batchstore.Options{Stream: schema.ResultsStream, Logger: w.log, Wait: w.replies.Wait}
	w.batches.results = batchstore.New(w.js, opts)
	if w.turns != nil {
		opts.Stream = schema.TurnsStream
		w.batches.turns = batchstore.New(w.js, opts)
	}
	return func() {
		w.batches.results.Close()
		args := []any{"results", w.batches.results.Batched(), "result_batches", w.batches.results.Batches()}
		if w.batches.turns != nil {
			w.batches.turns.Close()
			args = append(args, "turns", w.batches.turns.Batched(), "turn_batches", w.batches.turns.Batches())
		}
		w.log.Info("group commit: stored in batches", args...)
	}
}

// batchFor is the group commit for subject's stream, or nil for a message
// that goes alone.
func (w *Worker) batchFor(subject string) *batchstore.Store {
	switch {
	case strings.HasPrefix(subject, schema.ResultsRoot+"."):
		return w.batches.results
	case strings.HasPrefix(subject, schema.TurnsRoot+"."):
		return w.batches.turns
	}
	return nil
}

package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

// modelLister is implemented by backends that can say what they serve
// (*openai.Client does). Backends that cannot are not checked.
type modelLister interface {
	Models(ctx context.Context) ([]openai.Model, error)
}

// checkBackend waits until the backend answers /v1/models (a vLLM server
// takes minutes to load a large model, and a worker may start first), then
// makes sure it serves the run's model. A worker pointed at the wrong
// server or model would otherwise turn every prompt into a dead letter
// (404 is a permanent error), so that is a start-up error instead.
func (w *Worker) checkBackend(ctx context.Context) error {
	ml, ok := w.backend.(modelLister)
	if !ok {
		return nil
	}
	for attempt := 1; ; attempt++ {
		models, err := ml.Models(ctx)
		if err == nil {
			ids := make([]string, len(models))
			for i, m := range models {
				ids[i] = m.ID
			}
			if !slices.Contains(ids, w.manifest.Model) {
				return fmt.Errorf("worker %s: the backend serves %v, not the run's model %q: point --backend at a server of that model (or produce a new run for this one)", w.cfg.Name, ids, w.manifest.Model)
			}
			return nil
		}
		switch openai.Classify(err) {
		case openai.Canceled:
			return ctx.Err()
		case openai.Auth:
			return fmt.Errorf("worker %s: the backend refused our credentials (%w): check --api-key-file or AERIE_API_KEY", w.cfg.Name, err)
		}
		d := retryDelay(attempt, time.Second, 30*time.Second)
		w.log.Warn("backend not answering yet; waiting before pulling prompts", "err", err, "retry_in", d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}

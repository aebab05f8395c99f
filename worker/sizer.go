package worker

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

// metricsReader is implemented by backends that can read their server's
// Prometheus metrics (*openai.Client does).
type metricsReader interface {
	ServerMetrics(ctx context.Context) ([]byte, error)
}

// fallbackAfter is how many readings may fail before the first good one
// before an automatic window gives up and keeps the fixed window: a
// server still loading its model answers /metrics already, so failing
// this often means it serves none (or a proxy hides them).
const fallbackAfter = 3

// sizeWindow runs an automatic window (Config.AutoWindow) until ctx ends:
// every WindowPoll it reads the backend's load and resizes the window by
// windowRule. When the backend serves no vLLM metrics it warns once and
// leaves the window at Config.Window; a reading that fails after good
// ones keeps the window as it is (the breaker sees a server that is down).
func (w *Worker) sizeWindow(ctx context.Context) {
	mr, ok := w.backend.(metricsReader)
	if !ok {
		w.fallBack("the backend cannot read its server's metrics", nil)
		return
	}
	rule := &windowRule{Max: w.cfg.MaxWindow}
	t := time.NewTicker(w.cfg.WindowPoll)
	defer t.Stop()
	failures, read := 0, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		load, err := w.readLoad(ctx, mr)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if read {
				w.log.Debug("window: cannot read the backend's metrics; window kept", "window", w.win.capacity(), "err", err)
				continue
			}
			var apiErr *openai.APIError
			notServed := errors.Is(err, errNoLoadMetrics) || errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound
			if failures++; failures >= fallbackAfter || notServed {
				w.fallBack("the backend serves no vLLM load metrics at /metrics", err)
				return
			}
			continue
		}
		read = true
		cur := w.win.capacity()
		next, why := rule.next(cur, int(w.generating.Load()), load)
		if next != cur {
			w.win.resize(next)
			w.log.Debug("window resized", "from", cur, "to", next, "why", why,
				"running", load.Running, "waiting", load.Waiting, "kv_cache", load.KVUsage, "preemptions", load.Preemptions)
		}
	}
}

// readLoad reads the backend's load once, within one poll interval.
func (w *Worker) readLoad(ctx context.Context, mr metricsReader) (backendLoad, error) {
	rctx, cancel := context.WithTimeout(ctx, max(w.cfg.WindowPoll, time.Second))
	defer cancel()
	text, err := mr.ServerMetrics(rctx)
	if err != nil {
		return backendLoad{}, err
	}
	return parseLoad(text)
}

// fallBack warns, once, that the window stays fixed, and sets it to
// Config.Window.
func (w *Worker) fallBack(why string, err error) {
	w.win.resize(w.cfg.Window)
	args := []any{"window", w.cfg.Window}
	if err != nil {
		args = append(args, "err", err)
	}
	w.log.Warn("--window auto: "+why+"; keeping a fixed window", args...)
}

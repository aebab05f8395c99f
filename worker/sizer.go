package worker

import (
	"context"
	"errors"
	"time"
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

// windowDecision is what the automatic window's policy decides.
type windowDecision struct {
	// size is the new size, 0 to keep it; why says why it changed.
	size int
	why  string
	// fallBack is set when the window gives up on the backend's load.
	fallBack *fallBack
	// kept is the failed reading after which the window is kept.
	kept error
}

// sizeWindow is the automatic window's policy: the size windowRule gives
// for the backend's load, or, when the load cannot be read, the window
// kept (after a good reading: the breaker sees a server that is down) or
// the fixed window for good (before any, fallbackAfter times, or at once
// when the backend serves no load metrics). It returns the memory to
// keep.
func sizeWindow(p policy, r readings, m memory) (windowDecision, memory) {
	if !p.auto || m.load.fixed || r.load == nil && r.loadErr == nil {
		return windowDecision{}, m
	}
	if r.load == nil {
		if m.load.read {
			return windowDecision{kept: r.loadErr}, m
		}
		if m.load.failures++; m.load.failures < fallbackAfter && !r.loadNotServed {
			return windowDecision{}, m
		}
		m.load.fixed = true
		fb := &fallBack{why: "the backend serves no vLLM load metrics at /metrics", err: r.loadErr}
		if errors.Is(r.loadErr, errCannotReadMetrics) {
			fb = &fallBack{why: errCannotReadMetrics.Error()}
		}
		return windowDecision{size: p.window, fallBack: fb}, m
	}
	m.load.read = true
	m.rule.Max = p.maxWindow
	next, why := m.rule.next(r.size, r.generating, *r.load)
	if next == r.size {
		return windowDecision{}, m
	}
	return windowDecision{size: next, why: why}, m
}

package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

// breaker stops a worker from feeding prompts to a backend that is down.
// A run of consecutive backend failures (connections refused or cut, 502,
// 503, 504) with no success in between opens it; while open the worker
// pulls nothing, hands back prompts whose requests fail, and probes the
// backend's /health with backoff; the first healthy probe closes it. The
// zero value is not usable; see newBreaker.
type breaker struct {
	threshold int
	probe     func(context.Context) error
	// onChange is called, without the lock held, when the breaker opens
	// or closes.
	onChange func(open bool, reason string)

	mu       sync.Mutex
	failures int // consecutive backend failures
	open     bool
	reason   string
	openedAt time.Time
	closed   chan struct{} // closed while the breaker is closed
	opened   chan struct{} // signalled when the breaker opens
	paused   time.Duration // total time spent open
}

// DefaultBreakerThreshold is the number of consecutive backend failures
// that opens the breaker: enough that the odd cut stream of a healthy
// server (a success resets the count) does not pause a worker, few enough
// that an outage costs only a handful of requests.
const DefaultBreakerThreshold = 5

func newBreaker(threshold int, probe func(context.Context) error, onChange func(bool, string)) *breaker {
	b := &breaker{threshold: threshold, probe: probe, onChange: onChange,
		closed: make(chan struct{}), opened: make(chan struct{}, 1)}
	close(b.closed)
	return b
}

// backendDown reports whether err says the backend itself is unavailable,
// as opposed to something about one request.
func backendDown(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.Status {
		case 502, 503, 504:
			return true
		}
		return false
	}
	return openai.Classify(err) == openai.Transient
}

// record notes the outcome of a request. It returns true when the breaker
// is open after it: the failure belongs to an outage, not to the prompt.
func (b *breaker) record(err error) (open bool) {
	b.mu.Lock()
	if !backendDown(err) {
		if err == nil || openai.Classify(err) != openai.Canceled {
			b.failures = 0
		}
		open = b.open
		b.mu.Unlock()
		return open
	}
	b.failures++
	opening := !b.open && b.failures >= b.threshold
	if opening {
		b.open = true
		b.reason = "backend down: " + err.Error()
		b.openedAt = time.Now()
		b.closed = make(chan struct{})
		select {
		case b.opened <- struct{}{}:
		default:
		}
	}
	open, reason := b.open, b.reason
	b.mu.Unlock()
	if opening && b.onChange != nil {
		b.onChange(true, reason)
	}
	return open
}

// isOpen reports the state and why.
func (b *breaker) isOpen() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open, b.reason
}

// wait returns at once while closed; while open it returns when the
// breaker closes or ctx ends.
func (b *breaker) wait(ctx context.Context) {
	b.mu.Lock()
	ch := b.closed
	b.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// pausedFor is the total time the breaker has been open.
func (b *breaker) pausedFor() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open {
		return b.paused + time.Since(b.openedAt)
	}
	return b.paused
}

// run probes the backend while the breaker is open, until ctx ends.
func (b *breaker) run(ctx context.Context) {
	attempt := 0
	for {
		b.mu.Lock()
		open := b.open
		b.mu.Unlock()
		if !open {
			attempt = 0
			select {
			case <-ctx.Done():
				return
			case <-b.opened:
			}
			continue
		}
		attempt++
		if !sleep(ctx, retryDelay(attempt, 500*time.Millisecond, 15*time.Second)) {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := b.probe(pctx)
		cancel()
		if err == nil {
			b.close()
		}
	}
}

func (b *breaker) close() {
	b.mu.Lock()
	if !b.open {
		b.mu.Unlock()
		return
	}
	b.open = false
	b.failures = 0
	b.paused += time.Since(b.openedAt)
	close(b.closed)
	b.mu.Unlock()
	if b.onChange != nil {
		b.onChange(false, "")
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// breaker stops a worker from feeding prompts to a backend that cannot
// answer them. A run of consecutive server faults (5xx, errors inside a
// stream, connections refused or cut, no answer in time) with no success
// in between opens it, and so does a single configuration fault (our
// credentials refused, the run's model not served). A run of faults is
// evidence of an outage only if the server's health check fails too: a
// server that sheds load answers a few requests with 503 or 429 in a row
// while /health says it is up, and pausing for that costs a whole probe
// cycle. So when the run reaches the threshold the breaker asks health
// first; if it passes, only healthyFactor times the threshold opens it. While open the
// worker pulls nothing, hands back prompts whose requests fail without
// counting it against them, and probes the backend with backoff; the
// first probe that passes closes it. The zero value is not usable; see
// newBreaker.
type breaker struct {
	threshold int
	probe     func(context.Context) error
	// health asks the server whether it is up (vLLM's /health); nil when
	// the backend cannot say, and the threshold alone opens the breaker.
	health func(context.Context) error
	// onChange is called, without the lock held, when the breaker opens
	// or closes.
	onChange func(open bool, reason string)
	// onProbeFailure is called, without the lock held, with each failed
	// probe and the time the breaker has been open.
	onProbeFailure func(err error, open time.Duration)

	mu       sync.Mutex
	failures int // consecutive server faults
	// asked is non-nil while a request's goroutine asks health, and
	// closed when it has the answer: the others wait for it rather than
	// count their faults against their prompts meanwhile. healthy counts
	// the times health passed with the threshold reached.
	asked    chan struct{}
	healthy  int
	open     bool
	reason   string
	openedAt time.Time
	closed   chan struct{} // closed while the breaker is closed
	opened   chan struct{} // signalled when the breaker opens
	paused   time.Duration // total time spent open
}

// DefaultBreakerThreshold is the number of consecutive server faults that
// opens the breaker: enough that the odd cut stream of a healthy server
// (a success resets the count) does not pause a worker, few enough that
// an outage costs only a handful of requests.
const DefaultBreakerThreshold = 5

// healthyFactor times the threshold of consecutive faults opens the
// breaker even while health passes: a server whose /health answers but
// that fails every request is down for the run all the same, and each
// fault counts against a prompt while the breaker is closed.
const healthyFactor = 4

// healthTimeout bounds the health question asked as the threshold is
// reached.
const healthTimeout = 5 * time.Second

// Probes of a paused worker start probeBase apart and back off to
// probeMax: a probe is cheap (a file read, /health, /v1/models), and a
// fixed backend or key file should put the worker back to work within a
// few seconds.
const (
	probeBase = 500 * time.Millisecond
	probeMax  = 5 * time.Second
)

func newBreaker(threshold int, probe, health func(context.Context) error, onChange func(bool, string), onProbeFailure func(error, time.Duration)) *breaker {
	b := &breaker{threshold: threshold, probe: probe, health: health, onChange: onChange, onProbeFailure: onProbeFailure,
		closed: make(chan struct{}), opened: make(chan struct{}, 1)}
	close(b.closed)
	return b
}

// record notes the outcome of a request: its failure, nil for a
// success. It returns true when the breaker is open after it: the
// failure belongs to an outage or a configuration fault, not to the
// prompt.
func (b *breaker) record(failure *policy.Failure) (open bool) {
	f := policy.NoFault
	if failure != nil {
		f = failure.Fault
	}
	b.mu.Lock()
	switch f {
	case policy.NoFault, policy.Answered:
		if failure == nil || f == policy.Answered {
			b.failures = 0
		}
		open = b.open
		b.mu.Unlock()
		return open
	case policy.ServerFault:
		b.failures++
	}
	opening := !b.open && (f == policy.Misconfigured || b.failures >= b.threshold)
	if opening && f == policy.ServerFault && b.health != nil && b.failures < healthyFactor*b.threshold {
		opening = b.downByHealth()
	}
	if opening {
		b.open = true
		b.reason = pauseReason(failure)
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

// downByHealth asks health, with b.mu held on entry and on return,
// whether a run of faults at the threshold is an outage: true when the
// question fails and the breaker is not open yet. While another
// goroutine asks, it waits for that answer, which opens the breaker or
// not, and says no.
func (b *breaker) downByHealth() bool {
	if ch := b.asked; ch != nil {
		b.mu.Unlock()
		<-ch
		b.mu.Lock()
		return false
	}
	ch := make(chan struct{})
	b.asked = ch
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	err := b.health(ctx)
	cancel()
	b.mu.Lock()
	b.asked = nil
	if err == nil {
		b.healthy++
		close(ch)
		return false
	}
	// The waiters wake once the caller has opened the breaker: they
	// read it open when they take the lock after it.
	defer close(ch)
	return !b.open
}

// pauseReason says, for heartbeats and logs, why a fault paused the
// worker and what brings it back.
func pauseReason(failure *policy.Failure) string {
	err := failure.Err
	if errors.Is(err, policy.ErrNoTokenIDs) {
		return policy.ErrNoTokenIDs.Error()
	}
	if policy.PriorityRefused(err) {
		return policy.PriorityFix
	}
	if failure.Fault == policy.Misconfigured {
		return "backend refuses the run's requests: " + err.Error() +
			" (fix the key in --api-key-file, which is re-read while paused, or serve the run's model again)"
	}
	return "backend down: " + err.Error()
}

// down reports whether the breaker is open: the backend is down for the
// worker.
func (b *breaker) down() bool {
	open, _ := b.isOpen()
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
		open, openedAt := b.open, b.openedAt
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
		if !sleep(ctx, retryDelay(attempt, probeBase, probeMax)) {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := b.probe(pctx)
		cancel()
		if err == nil {
			b.close()
		} else if ctx.Err() == nil && b.onProbeFailure != nil {
			b.onProbeFailure(err, time.Since(openedAt))
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

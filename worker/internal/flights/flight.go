// Package flights keeps a worker's requests in flight. Its Registry is
// the only holder of them: the requests add and remove themselves, the
// pull decision looks at them all at once (Snapshot), and whoever hands
// a request back or cancels it for a hedge does so through Cancel. A
// Flight's states, and every way from one to another, are in this file.
package flights

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// Flight is one request to the backend, from before it is sent until
// its answer or failure is known. The fields set by New never change;
// the rest is the flight's own, safe from any goroutine.
type Flight struct {
	// Key names it in the registry; Lane is the index of its run among
	// the worker's.
	Key  policy.FlightKey
	Lane int
	// Unit is the prompt and sample it answers; Hint is the prompt's
	// length hint (0: none) and Attempt its delivery.
	Unit          schema.Unit
	Hint, Attempt int
	// Last marks the prompt's last delivery, never handed back; Group a
	// request of a message of several samples, never hedged.
	Last, Group bool

	tokens atomic.Int64
	state  atomic.Int32
	mu     sync.Mutex
	// sent and cancel are set as each request is sent, and cause when it
	// is cancelled (see Cancel): under mu.
	sent   time.Time
	cancel context.CancelCauseFunc
	cause  error
}

// Send marks f's request as sent now, to be cancelled with cancel: it
// waits for its first token, with no token counted. A flight whose
// request is sent again (a retry with a larger max_tokens) starts over.
func (f *Flight) Send(cancel context.CancelCauseFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent, f.cancel, f.cause = time.Now(), cancel, nil
	f.tokens.Store(0)
	f.state.Store(int32(policy.FlightWaiting))
}

// Streamed counts n tokens of f's answer: the first moves it from
// waiting to streaming, after which it is never handed back at the end
// of a run.
func (f *Flight) Streamed(n int) {
	f.tokens.Add(int64(n))
	if n > 0 {
		f.state.CompareAndSwap(int32(policy.FlightWaiting), int32(policy.FlightStreaming))
	}
}

// Tokens is the tokens of f's answer so far.
func (f *Flight) Tokens() int64 { return f.tokens.Load() }

// Sent is when f's request was sent; zero before.
func (f *Flight) Sent() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel == nil {
		return time.Time{}
	}
	return f.sent
}

// Ended is the error of f's request that ended with err: err, or, when
// f was cancelled (see Cancel) and not by the end of the caller's own
// context (callerDone), err wrapped in the cause it was cancelled with:
// policy.ErrTailHandBack, ErrSlowForHint or ErrHedgeWon.
func (f *Flight) Ended(err error, callerDone bool) error {
	if err == nil || callerDone {
		return err
	}
	switch policy.FlightState(f.state.Load()) {
	case policy.FlightHandedBack, policy.FlightHedgedAway:
		f.mu.Lock()
		cause := f.cause
		f.mu.Unlock()
		if cause != nil {
			return fmt.Errorf("%w: %w", cause, err)
		}
	}
	return err
}

// cancelAs cancels f's request with cause, moving it to state to, if it
// is sent and in one of the states from; it reports whether it did.
func (f *Flight) cancelAs(to policy.FlightState, cause error, from []policy.FlightState) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel == nil {
		return false
	}
	for _, s := range from {
		if f.state.CompareAndSwap(int32(s), int32(to)) {
			f.cause = cause
			f.cancel(cause)
			return true
		}
	}
	return false
}

// view is f as a decision sees it.
func (f *Flight) view() policy.Flight {
	v := policy.Flight{Key: f.Key, Lane: f.Lane, Unit: f.Unit, State: policy.FlightState(f.state.Load()), Tokens: f.tokens.Load(),
		Hint: f.Hint, Attempt: f.Attempt, Last: f.Last, Group: f.Group}
	v.Sent = f.Sent()
	return v
}

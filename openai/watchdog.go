package openai

import (
	"context"
	"fmt"
	"io"
	"time"
)

// timeLimitError says which of the client's own time limits ended a
// request. It is the cause of the request context's cancellation, and
// the error returned in its place. It deliberately does not wrap
// context.DeadlineExceeded, which Classify reserves for the caller's own
// context: a limit of the client is Transient (the server was too slow or
// stuck; the prompt may be fine).
type timeLimitError struct {
	what  string        // what did not happen in time, with a %v for limit
	name  string        // the limit's name, e.g. "idle timeout"
	limit time.Duration // its value
}

func (e *timeLimitError) Error() string {
	return fmt.Sprintf(e.what, e.limit) + " (" + e.name + " exceeded)"
}

// The limits a request can meet, as cancellation causes.
func firstTokenExpired(d time.Duration) error {
	return &timeLimitError{what: "no first token from the server within %v of sending the request", name: "first-token timeout", limit: d}
}

func idleExpired(d time.Duration, after string) error {
	return &timeLimitError{what: "no byte from the server for %v " + after, name: "idle timeout", limit: d}
}

func totalExpired(d time.Duration) error {
	return &timeLimitError{what: "request not finished within %v", name: "request timeout", limit: d}
}

func probeExpired(d time.Duration) error {
	return &timeLimitError{what: "no answer within %v", name: "probe timeout", limit: d}
}

// Where the idle timeout starts, as its error says.
const (
	afterFirstToken = "after the first token"
	afterHeaders    = "while reading the response"
)

// watchdog enforces a chat completion's first-token and idle timeouts
// with one timer that cancels the request's context (with a
// timeLimitError as the cause) when it fires. Until the first token it
// runs FirstTokenTimeout from the sending of the request and nothing
// resets it; once admit is called it runs IdleTimeout and every read
// that returns bytes re-arms it. No goroutine waits per read.
//
// Its methods are called only from the goroutine running the request
// (body reads are synchronous); the timer's function only calls cancel,
// which is safe from any goroutine. stop must be called when the request
// ends, so that no timer outlives it.
type watchdog struct {
	cancel   context.CancelCauseFunc
	idle     time.Duration
	timer    *time.Timer
	admitted bool
}

// newWatchdog starts the first-token timer.
func newWatchdog(cancel context.CancelCauseFunc, firstToken, idle time.Duration) *watchdog {
	cause := firstTokenExpired(firstToken)
	return &watchdog{
		cancel: cancel,
		idle:   idle,
		timer:  time.AfterFunc(firstToken, func() { cancel(cause) }),
	}
}

// admit notes that the first token has arrived (the first data event of
// a stream, or the headers of a whole response) and switches from the
// first-token timeout to the idle timeout. after says, in the idle
// timeout's error, where the silence began. Only the first call counts.
func (w *watchdog) admit(after string) {
	if w.admitted {
		return
	}
	w.admitted = true
	w.timer.Stop()
	cancel, cause := w.cancel, idleExpired(w.idle, after)
	w.timer = time.AfterFunc(w.idle, func() { cancel(cause) })
}

// saw notes that n bytes arrived from the server. Before admission bytes
// do not count: keep-alive comments are not a first token.
func (w *watchdog) saw(n int) {
	if n > 0 && w.admitted {
		w.timer.Reset(w.idle)
	}
}

// stop ends the watch: no limit fires after it returns (one that fired
// just before has already canceled the request).
func (w *watchdog) stop() { w.timer.Stop() }

// watchedBody is a response body whose reads the watchdog sees.
type watchedBody struct {
	io.ReadCloser
	dog *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.dog.saw(n)
	return n, err
}

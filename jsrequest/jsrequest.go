// Package jsrequest makes requests to a NATS JetStream server that are
// bounded in time and made again when the server may answer later: it
// did not answer, or answered that it cannot for now (a stream leader
// being elected in a cluster, about 3 s). The commands that change a
// run's state from outside the pipeline (replay, reconcile, runs rm)
// make every request through it.
package jsrequest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for Options.
const (
	// DefaultTimeout bounds one request to the server. A local broker
	// answers in well under a millisecond and a cluster elects a new
	// stream leader in about 3 s; 10 s only trips on a server that is gone.
	DefaultTimeout = 10 * time.Second
	// DefaultAttempts is how many times a request that failed in a way a
	// later attempt may not (a timeout, no responders while a leader is
	// elected) is made before giving up. With the pause between attempts
	// (0.25 s doubling, at most 2 s) five attempts outlast an election.
	DefaultAttempts = 5
)

// Pauses between attempts of one request.
const (
	retryBase = 250 * time.Millisecond
	retryMax  = 2 * time.Second
)

// Options tune how requests to the server are made. The zero value uses
// the defaults above.
type Options struct {
	// Timeout bounds each request; zero means DefaultTimeout.
	Timeout time.Duration
	// Attempts per request; zero means DefaultAttempts, 1 means no retry.
	Attempts int
}

// Validate reports a negative timeout or attempt count.
func (o Options) Validate() error {
	if o.Timeout < 0 {
		return fmt.Errorf("request timeout is %v: use a positive duration, or 0 for the default of %v", o.Timeout, DefaultTimeout)
	}
	if o.Attempts < 0 {
		return fmt.Errorf("attempts per request is %d: use a positive number, or 0 for the default of %d", o.Attempts, DefaultAttempts)
	}
	return nil
}

// WithDefaults returns o with its zero fields set to the defaults.
func (o Options) WithDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Attempts == 0 {
		o.Attempts = DefaultAttempts
	}
	return o
}

// Do makes one request to the server, each attempt bounded by o.Timeout,
// and makes it again after a pause when the failure may be transient.
// what describes the request in the error. fn must be safe to repeat:
// reads change nothing, a purge that stops at a sequence already seen or
// of what is already gone is no error, and a publish repeats its message
// id and expects the subject to be empty.
func Do(ctx context.Context, o Options, what string, fn func(ctx context.Context) error) error {
	o = o.WithDefaults()
	var err error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, o.Timeout)
		err = fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !Transient(err) || attempt >= o.Attempts {
			return fmt.Errorf("%s: %w", what, err)
		}
		t := time.NewTimer(min(retryBase<<(attempt-1), retryMax))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (stopped while retrying)", what, err)
		case <-t.C:
		}
	}
}

// Transient reports whether another attempt of a failed request may
// succeed: the server did not answer, or answered that it is temporarily
// unable to.
func Transient(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503 &&
			apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabled &&
			apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabledForAccount
	}
	return false
}

package requeue

import (
	"fmt"
	"time"
)

// Defaults for Options.
const (
	// DefaultTimeout bounds one request to the server. A local broker
	// answers in well under a millisecond and a cluster elects a new stream
	// leader in about 3 s; 10 s only trips on a server that is gone.
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

func (o Options) validate() error {
	if o.Timeout < 0 {
		return fmt.Errorf("request timeout is %v: use a positive duration, or 0 for the default of %v", o.Timeout, DefaultTimeout)
	}
	if o.Attempts < 0 {
		return fmt.Errorf("attempts per request is %d: use a positive number, or 0 for the default of %d", o.Attempts, DefaultAttempts)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Attempts == 0 {
		o.Attempts = DefaultAttempts
	}
	return o
}

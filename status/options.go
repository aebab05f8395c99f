package status

import (
	"fmt"
	"time"

	"github.com/aerie-dev/aerie/jsrequest"
)

// Defaults for Options.
const (
	// DefaultStaleAfter: a worker sends a heartbeat every 2 s, so 10 s is
	// five missed in a row, the window the aggregator counts live workers
	// by.
	DefaultStaleAfter = 10 * time.Second
	// DefaultEventStaleAfter: the aggregator publishes an event every 5 s;
	// 15 s is three missed.
	DefaultEventStaleAfter = 15 * time.Second
	// DefaultRateWindow is how far back from a worker's last heartbeat
	// its tokens/s is measured: five heartbeats.
	DefaultRateWindow = 10 * time.Second
	// DefaultMaxWorkers bounds the worker lines: each restart of a worker
	// is a new name, and heartbeats are kept for days.
	DefaultMaxWorkers = 100
	// DefaultInterval is the time between two frames of a watch.
	DefaultInterval = 2 * time.Second
)

// Options tune Gather and List. The zero value uses the defaults.
type Options struct {
	// Request bounds each request to the server (see jsrequest).
	Request jsrequest.Options
	// StaleAfter is the age past which a worker's heartbeat is stale.
	StaleAfter time.Duration
	// EventStaleAfter is the age past which a throughput event of a run
	// that is not done is stale.
	EventStaleAfter time.Duration
	// RateWindow is the span of heartbeats a worker's tokens/s is
	// measured over.
	RateWindow time.Duration
	// MaxWorkers is the most worker lines: the live ones, then the most
	// recent stale ones.
	MaxWorkers int
}

// Validate reports negative values.
func (o Options) Validate() error {
	if err := o.Request.Validate(); err != nil {
		return err
	}
	if o.StaleAfter < 0 || o.EventStaleAfter < 0 || o.RateWindow < 0 || o.MaxWorkers < 0 {
		return fmt.Errorf("status: durations and the worker limit must not be negative")
	}
	return nil
}

func (o Options) withDefaults() Options {
	o.Request = o.Request.WithDefaults()
	if o.StaleAfter == 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	if o.EventStaleAfter == 0 {
		o.EventStaleAfter = DefaultEventStaleAfter
	}
	if o.RateWindow == 0 {
		o.RateWindow = DefaultRateWindow
	}
	if o.MaxWorkers == 0 {
		o.MaxWorkers = DefaultMaxWorkers
	}
	return o
}

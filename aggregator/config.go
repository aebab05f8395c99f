package aggregator

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/schema"
)

// Defaults for Config.
const (
	DefaultDataDir       = "/data"
	DefaultEventInterval = 5 * time.Second
	// DefaultBatch is how many results are written with one fsync.
	DefaultBatch = 256
	// DefaultRefreshInterval is how often failed.jsonl is compared with
	// the dead letters in NATS, to take out prompts that a replay has
	// queued again. The run's end is checked at once in any case.
	DefaultRefreshInterval = 30 * time.Second
	// DefaultFetchBytes bounds the bytes of one fetched batch, so that a
	// batch of long answers does not hold gigabytes in memory. A fetch
	// asks for as many messages as fit at the size of the largest one the
	// previous fetch brought (at first, the server's max_payload), and at
	// least one: the bound is kept by count, not given to the server (see
	// consume).
	DefaultFetchBytes = 64 << 20
)

// fetchWait bounds one fetch: it is how long a stopping aggregator may
// wait for its open fetch to end (see consume), unless the run is done.
const fetchWait = time.Second

// Config configures an aggregator. Zero fields take the defaults above.
type Config struct {
	// Run is the run to aggregate; required.
	Run string
	// DataDir is where <run>/completions.jsonl, failed.jsonl and
	// events.jsonl are written.
	DataDir string
	// Out, when set, is where a hidden-states run's dataset goes on this
	// host (its hidden_states/ beside it), over the directory the run was
	// produced with (schema.Extraction.Out) or <DataDir>/<run>: for a
	// shared disk mounted elsewhere here. Empty: those.
	Out string
	// EventInterval is the period of throughput events.
	EventInterval time.Duration
	// Batch is the most results written per fsync.
	Batch int
	// FetchBytes bounds the bytes of one fetched batch (see
	// DefaultFetchBytes).
	FetchBytes int
	// LeaseWait is how long to wait for another aggregator of the run to
	// let go of it before giving up with a *HeldError; zero means
	// DefaultLeaseWait, a negative value not to wait at all.
	LeaseWait time.Duration
	// RefreshInterval is how often failed.jsonl is compared with the dead
	// letters (see DefaultRefreshInterval).
	RefreshInterval time.Duration
	// ExitWhenDone makes Run return once every prompt of the manifest is
	// completed or failed; otherwise it keeps running, for prompts that
	// are replayed later.
	ExitWhenDone bool
	// OnEvent, if set, is called with every throughput event (for a live
	// display). It must not block.
	OnEvent func(schema.Throughput)
	// Metrics, if set, is where the aggregator registers its Prometheus
	// metrics (aerie_run_*, aerie_aggregator_*, aerie_data_dir_*,
	// labelled with the run); nil means none are kept.
	Metrics prometheus.Registerer
	// Observer, if set, sees events, heartbeats and answers (see
	// Observer); nil means none does.
	Observer Observer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.EventInterval == 0 {
		c.EventInterval = DefaultEventInterval
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.FetchBytes == 0 {
		c.FetchBytes = DefaultFetchBytes
	}
	if c.LeaseWait == 0 {
		c.LeaseWait = DefaultLeaseWait
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first configuration problem.
func (c Config) Validate() error {
	if err := schema.ValidateRun(c.Run); err != nil {
		return fmt.Errorf("aggregator: %w", err)
	}
	if c.EventInterval < 0 || c.Batch < 0 || c.FetchBytes < 0 || c.RefreshInterval < 0 {
		return errors.New("aggregator: event interval, batch, fetch bytes and refresh interval must not be negative")
	}
	return nil
}

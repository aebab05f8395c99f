package aggregator

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// Defaults for Config.
const (
	DefaultDataDir       = "/data"
	DefaultEventInterval = 5 * time.Second
	// DefaultBatch is how many results are written with one fsync.
	DefaultBatch = 256
)

// Config configures an aggregator. Zero fields take the defaults above.
type Config struct {
	// Run is the run to aggregate; required.
	Run string
	// DataDir is where <run>/completions.jsonl, failed.jsonl and
	// events.jsonl are written.
	DataDir string
	// EventInterval is the period of throughput events.
	EventInterval time.Duration
	// Batch is the most results written per fsync.
	Batch int
	// ExitWhenDone makes Run return once every prompt of the manifest is
	// completed or failed; otherwise it keeps running, for prompts that
	// are replayed later.
	ExitWhenDone bool
	// OnEvent, if set, is called with every throughput event (for a live
	// display). It must not block.
	OnEvent func(schema.Throughput)
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
	if c.EventInterval < 0 || c.Batch < 0 {
		return errors.New("aggregator: event interval and batch must not be negative")
	}
	return nil
}

package producer

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// Defaults for Config.
const (
	// DefaultMaxPending bounds the publishes awaiting their acknowledgement.
	// 256 keeps the server busy (acks come back in well under a
	// millisecond on a local broker) while a failure never leaves more than
	// a few hundred prompts to retry.
	DefaultMaxPending = 256
	// DefaultRetries is how many times one prompt is published before it
	// is reported as not queued. With the backoff between attempts (0.25 s
	// doubling, at most 5 s) five attempts outlast a cluster leader
	// election, which takes about 3 s.
	DefaultRetries = 5
	// DefaultAckTimeout is how long one publish waits for the server's
	// acknowledgement, counted from the moment it was sent. A local broker
	// answers in well under a millisecond and a cluster elects a new
	// leader in about 3 s; 30 s only trips on a server that is gone or a
	// stream leader that drops publishes.
	DefaultAckTimeout = 30 * time.Second
)

// Config configures one produce. Run, PromptsFile and Model are required;
// every other field has a usable zero value.
type Config struct {
	// Run names the batch; it becomes part of subjects, so it must pass
	// schema.ValidateRun.
	Run string
	// PromptsFile is the JSONL input, read twice (validate, then publish)
	// and never held in memory whole. See ParseLine for the accepted line
	// shapes.
	PromptsFile string
	// Model is the model every worker of the run generates with; it is
	// stored in the run manifest.
	Model string
	// Params are the sampling parameters stored in the run manifest; the
	// zero value leaves them all to the backend's defaults.
	Params schema.Params
	// Policy is the run's failure and truncation policy, stored in the
	// manifest; the zero value means the defaults (see schema.Policy).
	Policy schema.Policy
	// SkipInvalid publishes the valid lines when some are invalid (the
	// problems are logged and reported). False, the default, publishes
	// nothing when any line is invalid: a run should not silently miss
	// prompts.
	SkipInvalid bool
	// MaxPending bounds publishes awaiting acknowledgement; zero means
	// DefaultMaxPending. The JetStream context's own limit
	// (jetstream.WithPublishAsyncMaxPending) should be at least as large.
	MaxPending int
	// Retries is the number of publish attempts per prompt before it is
	// reported as not queued; zero means DefaultRetries.
	Retries int
	// AckTimeout is how long one publish attempt waits for the server's
	// acknowledgement, counted from the moment it was sent, before it is
	// retried (with the same message id, so a late first copy and the
	// retry are stored once); zero means DefaultAckTimeout. Every pending
	// publish has its own deadline: when a stream leader drops publishes,
	// all of them time out together, not one after another.
	AckTimeout time.Duration
	// Progress receives progress reports; nil means none. A terminal gets a
	// progress bar, anything else (a log file, a pipe) a plain line every
	// few seconds.
	Progress io.Writer
	// Logger receives warnings about skipped lines and the closing summary;
	// nil means slog.Default().
	Logger *slog.Logger
	// Provision tunes the streams and the workers' consumer if this
	// produce creates them; existing ones are used as they are.
	Provision provision.Options
}

// Validate checks the fields that do not need the file or the server.
func (c Config) Validate() error {
	var errs []error
	if err := schema.ValidateRun(c.Run); err != nil {
		errs = append(errs, err)
	}
	if c.PromptsFile == "" {
		errs = append(errs, errors.New("no prompts file given: name a JSONL file with one prompt per line"))
	}
	if c.Model == "" {
		errs = append(errs, errors.New("no model given: name the model the workers generate with (it is stored in the run manifest)"))
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxPending < 0 {
		errs = append(errs, fmt.Errorf("max pending publishes is %d: use a positive number, or 0 for the default of %d", c.MaxPending, DefaultMaxPending))
	}
	if c.Retries < 0 {
		errs = append(errs, fmt.Errorf("publish retries is %d: use a positive number, or 0 for the default of %d", c.Retries, DefaultRetries))
	}
	if c.AckTimeout < 0 {
		errs = append(errs, fmt.Errorf("publish ack timeout is %v: use a positive duration, or 0 for the default of %v", c.AckTimeout, DefaultAckTimeout))
	}
	if err := validateParams(c.Params); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("produce configuration: %w", errors.Join(errs...))
	}
	return nil
}

func validateParams(p schema.Params) error {
	var errs []error
	if p.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("max_tokens is %d: use a positive number, or 0 to let the backend fill the context window", p.MaxTokens))
	}
	if p.Temperature != nil && *p.Temperature < 0 {
		errs = append(errs, fmt.Errorf("temperature is %g: it must be 0 or more", *p.Temperature))
	}
	if p.TopP != nil && (*p.TopP <= 0 || *p.TopP > 1) {
		errs = append(errs, fmt.Errorf("top_p is %g: it must be more than 0 and at most 1", *p.TopP))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// Defaults for Config.
const (
	// DefaultMaxPending bounds the prompts awaiting their acknowledgement.
	// 1,024 lets the batch being filled while another is stored grow to
	// hundreds of prompts (one fsync each batch), while a failure never
	// leaves more than about a thousand prompts to retry.
	DefaultMaxPending = 1024
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
	// MaxSamples bounds Config.Samples: every sample is a unit of work
	// queued, answered and written on its own, so a mistyped count would
	// multiply the run.
	MaxSamples = 1000
)

// Config configures one produce. Run, PromptsFile and Model are required;
// every other field has a usable zero value.
type Config struct {
	// Run names the batch; it becomes part of subjects, so it must pass
	// schema.ValidateRun.
	Run string
	// PromptsFile is the JSONL input, read twice (validate, then publish)
	// and never held in memory whole. See dataset.ParseLine for the accepted line
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
	// Turns is which assistant turns the run generates: schema.TurnsLast
	// (or empty, the same) answers each conversation as given;
	// schema.TurnsAll regenerates every assistant turn of it, in order
	// (see dataset.ParseOptions for how lines are read then). Stored in the
	// manifest.
	Turns string
	// ContextReasoning is, with TurnsAll, what an earlier generated
	// answer carries into the context of the later turns:
	// schema.ContextReasoningDrop (or empty, the same) its content only,
	// schema.ContextReasoningKeep its reasoning too. With TurnsLast there
	// are no generated earlier turns: keep is refused, drop is accepted
	// and not stored.
	ContextReasoning string
	// Samples is how many independent answers each prompt gets, each
	// queued as its own unit (schema.Unit) and written as its own output
	// line; 0 or 1 means one. At most MaxSamples.
	Samples int
	// ReturnTokenIDs asks the backend for the token ids of every prompt
	// and answer (vLLM's return_token_ids), stored with each turn. False,
	// the default, asks for none.
	ReturnTokenIDs bool
	// Needs names features every reader of the run must implement besides
	// those its settings use (schema.Manifest.Needs): to keep a run from
	// builds older than one that has them, such as a fleet being
	// upgraded for a fix that is named as a feature. Each must be one
	// this build implements. Nil adds none.
	Needs []string
	// Schedule is how the run shares workers that serve several runs
	// (priority, weight), stored in the manifest when the run is first
	// produced; nil means the default schedule. A run produced again
	// keeps its stored schedule (`aerie runs set` changes it): a schedule
	// given that differs is reported, not applied.
	Schedule *schema.Schedule
	// Order is the order prompts are queued in, which is the order workers
	// take them: OrderInput (the file's), OrderLongestFirst (by
	// descending length hint, the prompts without one after them in the
	// file's order), or empty for longest first when at least half the
	// valid prompts have a hint, and the file's order otherwise. Queuing
	// the longest answers first keeps one of them from starting last and
	// holding the whole fleet at the end of the run.
	Order string
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

	// alone publishes every prompt on its own instead of in atomic
	// batches: for tests that inject faults into single publishes.
	alone bool

	// Accepted, if set, is called once the run's manifest is stored (or
	// found with the same settings and prompts) and the workers'
	// consumer exists, before the first prompt is published: from then
	// on workers and an aggregator may work on the run while it is being
	// queued, the manifest's total being final. It is not called when
	// Run fails before that. Nil means nobody is told.
	Accepted func(*schema.Manifest)
	// Task is the run's task kind: schema.TaskChat (or empty, the same)
	// answers prompts; schema.TaskHiddenStates extracts the target's
	// hidden states of samples of token ids (PromptsFile holds rows of
	// input_ids and loss_mask), as Extraction says.
	Task string
	// Extraction is what a TaskHiddenStates run extracts; its Tokens is
	// filled from the file. Required with that task, nil otherwise.
	Extraction *schema.Extraction
	// VocabSize and MaxInputTokens, when positive, refuse extraction
	// samples with a token id at or beyond VocabSize, or more than
	// MaxInputTokens tokens: the server would refuse them.
	VocabSize, MaxInputTokens int
	// CheckTokenIDs, when set, is asked, after the file is validated and
	// before anything is queued, whether the server takes the largest
	// token id of an extraction run's samples; its error refuses the
	// produce, naming the sample. Nil checks nothing.
	CheckTokenIDs func(ctx context.Context, maxID int64) error
}

// extraction reports whether the run extracts hidden states.
func (c Config) extraction() bool { return c.Task == schema.TaskHiddenStates }

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
	switch c.Turns {
	case "", schema.TurnsLast, schema.TurnsAll:
	default:
		errs = append(errs, fmt.Errorf("turns %q: use %s (answer each conversation as given) or %s (regenerate every assistant turn)", c.Turns, schema.TurnsLast, schema.TurnsAll))
	}
	switch c.ContextReasoning {
	case "", schema.ContextReasoningDrop:
	case schema.ContextReasoningKeep:
		if c.Turns != schema.TurnsAll {
			errs = append(errs, fmt.Errorf("context reasoning %q applies only to turns %s: with turns %s the earlier assistant turns are sent as the input gives them", c.ContextReasoning, schema.TurnsAll, schema.TurnsLast))
		}
	default:
		errs = append(errs, fmt.Errorf("context reasoning %q: use %s (earlier answers go back as content only) or %s (with their reasoning)", c.ContextReasoning, schema.ContextReasoningDrop, schema.ContextReasoningKeep))
	}
	switch c.Order {
	case "", OrderInput, OrderLongestFirst:
	default:
		errs = append(errs, fmt.Errorf("order %q: use %s or %s", c.Order, OrderInput, OrderLongestFirst))
	}
	if c.Samples < 0 || c.Samples > MaxSamples {
		errs = append(errs, fmt.Errorf("samples is %d: use 1 to %d answers per prompt (0 means 1)", c.Samples, MaxSamples))
	}
	if err := c.Params.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sampling parameters: %w", err))
	}
	switch c.Task {
	case "", schema.TaskChat:
		if c.Extraction != nil {
			errs = append(errs, fmt.Errorf("extraction settings given for a %s run: use task %s", schema.TaskChat, schema.TaskHiddenStates))
		}
	case schema.TaskHiddenStates:
		if c.Extraction == nil {
			errs = append(errs, errors.New("task hidden-states needs its layer ids, hidden size and dtype"))
		} else if err := c.Extraction.Validate(); err != nil {
			errs = append(errs, err)
		}
		if c.Samples > 1 || c.turnsAll() || c.ReturnTokenIDs {
			errs = append(errs, errors.New("samples, turns all and return token ids are generation's: an extraction run reads each sample once"))
		}
		if c.SkipInvalid {
			errs = append(errs, errors.New("skip invalid with task hidden-states: a sample's idx is its row, so a skipped row would shift every later one against the trainer's dataset; correct or remove the rows named"))
		}
	default:
		errs = append(errs, fmt.Errorf("task %q: use %s or %s", c.Task, schema.TaskChat, schema.TaskHiddenStates))
	}
	if l := schema.Lacking(c.Needs); len(l) > 0 {
		errs = append(errs, fmt.Errorf("needs %s: this aerie (%s) does not implement it, so it cannot produce a run that needs it; its features are %s",
			strings.Join(l, ", "), schema.BuildVersion(), strings.Join(schema.Implemented(), ", ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("produce configuration: %w", errors.Join(errs...))
	}
	return nil
}

// samples is the number of samples per prompt: Samples, or 1.
func (c Config) samples() int { return max(c.Samples, 1) }

// turnsAll reports whether every assistant turn is regenerated.
func (c Config) turnsAll() bool { return c.Turns == schema.TurnsAll }

// parseOptions says how the prompts file's records are read.
func (c Config) parseOptions() dataset.ParseOptions {
	return dataset.ParseOptions{Turns: c.Turns, Model: c.Model, Task: c.Task}
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

// Package doctor checks, before a run starts, everything that would
// otherwise fail or misbehave hours into it: NATS, the permissions of the
// credentials against what their role's command needs, JetStream, the shape
// of aerie's streams and of the run's consumer, the run manifest, the
// backend (health, model name, context length, one real completion), the
// output directory and its free space, and the systemd units' commands.
//
// Run performs every check and returns a Report, one Result per check.
// Preflight performs the few that `aerie work` and `aerie run` need before
// they take a prompt, and returns an error naming the failures.
//
// Every check only looks: nothing is created, changed or deleted, except
// a temporary file (and any missing directories) under the data directory,
// removed again before the check ends.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/natsdial"
	"github.com/aerie-dev/aerie/schema"
)

// Defaults for Config.
const (
	// DefaultWorkers is the number of workers assumed to share the run's
	// consumer.
	DefaultWorkers = 1
	// DefaultWindow is a worker's default window, the same as
	// worker.DefaultWindow: prompts in flight per worker.
	DefaultWindow = 200
	// DefaultMaxWindow is the most an automatic window grows to, the same
	// as worker.DefaultMaxWindow.
	DefaultMaxWindow = 1024
	// DefaultCheckTimeout bounds each check that talks to a server or
	// touches the disk.
	DefaultCheckTimeout = 10 * time.Second
	// DefaultCompletionTimeout bounds the test completion. It is longer
	// than the other checks because a busy backend queues the request
	// behind the running batch before answering.
	DefaultCompletionTimeout = 60 * time.Second
	// DefaultScanTimeout bounds reading the prompts file.
	DefaultScanTimeout = 5 * time.Minute
)

// Config says what to check. Every field is optional: a check whose input
// is missing is skipped and says why.
type Config struct {
	// NATSURL is the NATS server URL, or several comma separated. Empty
	// skips every check that needs NATS.
	NATSURL string
	// NATSCreds is a NATS credentials file; empty connects without one.
	NATSCreds string
	// NATSOptions are further connect options: the role's nkey, inbox
	// prefix and TLS settings. Nil connects with nats.go's defaults, which
	// a server enforcing aerie's roles or TLS refuses.
	NATSOptions []nats.Option
	// NATSWait is how long the nats check waits for a server that does
	// not answer yet, trying again with a back-off (natsdial.Dial); zero
	// tries once. Log, when set, hears what it waits for.
	NATSWait time.Duration
	Log      *slog.Logger
	// BackendWait is how long the backend checks wait for a backend that
	// is starting or failing as one that sheds load does (a refused
	// connection, 503, 429, a cut stream), trying again with a back-off
	// (see untilAnswered); zero tries once. What an answer proves wrong
	// fails at once.
	BackendWait time.Duration
	// Role is the aerie role whose credentials NATSOptions carry: the
	// permissions check asks the server what they may do and names what
	// that role's command (aerie work for the worker) would miss, and the
	// other checks leave alone the streams the role may not read. Empty
	// skips the permissions check and reads everything.
	Role auth.Role
	// Run is the run whose consumer, manifest and model are checked.
	// Empty skips those checks. It must be a valid run name.
	Run string
	// Model is the model the run will generate with, for a run that has
	// no manifest yet (aerie run before it queues, or before aerie
	// produce): the model check looks for it among the served models and
	// the test completion uses it. Once the run has a manifest, the
	// manifest's model is checked and Model is not used. Empty: with no
	// manifest the model check only lists what the backend serves.
	Model string
	// ReturnTokenIDs says, for a run that has no manifest yet, that it
	// will store token ids (--return-token-ids): the test completion
	// asks for them and fails when the backend does not return them.
	// Once the run has a manifest, the manifest's setting is used.
	ReturnTokenIDs bool
	// TurnsAll, Samples and MaxTokens are the run's --turns all,
	// --samples and --max-tokens for a run that has no manifest yet: the
	// disk and store checks count every turn and sample the run will
	// generate, each up to MaxTokens. Zero Samples means one; zero
	// MaxTokens, unset. Once the run has a manifest, it says.
	TurnsAll  bool
	Samples   int
	MaxTokens int
	// YieldToServing says the workers will yield to serving traffic
	// (aerie work --yield-to-serving): the test completion carries their
	// priority, BatchPriority (zero: worker.DefaultBatchPriority), and
	// fails, with the fix, on a server that does not run vLLM's
	// --scheduling-policy priority, which refuses it.
	YieldToServing bool
	BatchPriority  int
	// Backend is the OpenAI-compatible base URL of the LLM server, e.g.
	// http://127.0.0.1:8000. Empty skips the backend checks.
	Backend string
	// Engine names the engine that serves Backend (engine.Names); empty
	// or "auto" tells it from what the server shows (engine.Detect).
	Engine string
	// APIKey is sent to the backend. It never appears in a report, even
	// when the backend echoes it back.
	APIKey string
	// DataDir is the aggregator's output root: the run writes under
	// DataDir/Run. Empty skips the data directory and disk space checks.
	DataDir string
	// Extraction is the settings of a hidden-states run not produced
	// yet (aerie run --task hidden-states); once the run has a manifest,
	// it says. Nil: a generation run.
	Extraction *schema.Extraction
	// Out, when set, is where a hidden-states run's output goes on this
	// host whatever its manifest names (a worker's or an aggregator's
	// --out). OutRoot is where it goes, as OutRoot/Run, when neither
	// names one (a worker's --data-dir); empty: DataDir/Run.
	Out, OutRoot string
	// PromptsFile is the JSONL file of prompts; when given, every prompt's
	// length is compared with the model's context length. Empty skips
	// that check.
	PromptsFile string
	// Workers is how many workers will share the run's consumer (one per
	// GPU host, or aerie run's --workers). Zero means DefaultWorkers.
	Workers int
	// Window is each worker's window, or the size an automatic one
	// starts at. Zero means DefaultWindow.
	Window int
	// AutoWindow says the workers size their windows from their
	// backends' load (--window auto), up to MaxWindow each; zero
	// MaxWindow means DefaultMaxWindow. The consumer is then checked
	// against what grown windows may hold, not only the start.
	AutoWindow bool
	MaxWindow  int
	// Units is a systemd unit file, or a directory whose *.service files
	// are checked. Empty skips the check.
	Units string
	// CheckTimeout bounds each check other than the completion and the
	// prompts scan. Zero means DefaultCheckTimeout.
	CheckTimeout time.Duration
	// CompletionTimeout bounds the test completion. Zero means
	// DefaultCompletionTimeout.
	CompletionTimeout time.Duration
	// ScanTimeout bounds reading the prompts file. Zero means
	// DefaultScanTimeout.
	ScanTimeout time.Duration
}

// String describes the configuration with the API key redacted, so that
// a Config can be logged.
func (c Config) String() string {
	key := "none"
	if c.APIKey != "" {
		key = "[redacted]"
	}
	return fmt.Sprintf("doctor.Config{NATSURL: %q, Run: %q, Model: %q, Backend: %q, APIKey: %s, DataDir: %q, PromptsFile: %q, Workers: %d, Window: %d, AutoWindow: %t, MaxWindow: %d, Units: %q}",
		natsdial.Redact(c.NATSURL), c.Run, c.Model, c.Backend, key, c.DataDir, c.PromptsFile, c.Workers, c.Window, c.AutoWindow, c.MaxWindow, c.Units)
}

// GoString is String, so that %#v does not print the API key either.
func (c Config) GoString() string { return c.String() }

// Validate reports every field that cannot be used.
func (c Config) Validate() error {
	var errs []error
	if c.Run != "" {
		if err := schema.ValidateRun(c.Run); err != nil {
			errs = append(errs, fmt.Errorf("doctor: %w", err))
		}
	}
	if c.Workers < 0 || c.Window < 0 || c.MaxWindow < 0 {
		errs = append(errs, fmt.Errorf("doctor: workers (%d), window (%d) and max window (%d) must not be negative", c.Workers, c.Window, c.MaxWindow))
	}
	if c.CheckTimeout < 0 || c.CompletionTimeout < 0 || c.ScanTimeout < 0 || c.NATSWait < 0 || c.BackendWait < 0 {
		errs = append(errs, errors.New("doctor: timeouts must not be negative"))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = DefaultMaxWindow
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = DefaultCheckTimeout
	}
	if c.CompletionTimeout == 0 {
		c.CompletionTimeout = DefaultCompletionTimeout
	}
	if c.ScanTimeout == 0 {
		c.ScanTimeout = DefaultScanTimeout
	}
	return c
}

// check is one entry of the table: a name, how long it may take, whether
// Preflight runs it, and the function that runs it.
type check struct {
	name      string
	timeout   func(Config) time.Duration
	preflight bool
	run       func(ctx context.Context, s *session) Result
}

func checkTimeout(c Config) time.Duration   { return c.CheckTimeout }
func natsTimeout(c Config) time.Duration    { return c.CheckTimeout + c.NATSWait }
func backendTimeout(c Config) time.Duration { return c.CheckTimeout + c.BackendWait }
func answerTimeout(c Config) time.Duration  { return c.CompletionTimeout + c.BackendWait }
func scanTimeout(c Config) time.Duration    { return c.ScanTimeout }

// checks is every check, in the order they run. A check may use what an
// earlier one found (the connection, the manifest, the served models);
// when that is missing it is skipped with the reason.
var checks = []check{
	{"nats", natsTimeout, true, checkNATS},
	{"permissions", checkTimeout, true, checkPermissions},
	{"jetstream", checkTimeout, true, checkJetStream},
	{"streams", checkTimeout, false, checkStreams},
	{"manifest", checkTimeout, true, checkManifest},
	{"consumer", checkTimeout, false, checkConsumer},
	{"fleet", checkTimeout, false, checkFleet},
	{"backend", backendTimeout, true, checkHealth},
	{"model", backendTimeout, true, checkModel},
	{"engine", backendTimeout, true, checkEngine},
	{"context-length", scanTimeout, false, checkContextLength},
	{"completion", answerTimeout, true, checkCompletion},
	{"priority", answerTimeout, true, checkPriority},
	{"data-dir", checkTimeout, true, checkDataDir},
	{"disk-space", checkTimeout, true, checkDiskSpace},
	{"store-space", checkTimeout, false, checkStoreSpace},
	{"units", checkTimeout, false, checkUnits},
	{"extraction", answerTimeout, true, checkExtraction},
	{"extract-space", scanTimeout, true, checkHiddenStatesSpace},
}

// Run performs every check and returns their results in a fixed order.
// It never returns early: a failed check makes the checks that depend on
// it skip, and the others still run. An invalid Config gives a report
// with one failed check named "config". If ctx ends, the checks not yet
// run are skipped.
func Run(ctx context.Context, cfg Config) Report {
	return run(ctx, cfg, false)
}

// Preflight performs the checks that matter when `aerie work` or
// `aerie run` starts: NATS and JetStream, the run manifest, backend
// health, the run's model among the served ones, one real completion,
// and the data directory with its free space (when Config.DataDir is
// set; a worker host has none). It returns nil when none fails, and
// otherwise a *PreflightError listing each failure with its fix.
//
// It waits for a NATS server that does not answer yet for up to
// Config.NATSWait, and for a backend that is starting or shedding load
// for up to Config.BackendWait; with both zero it waits for nothing, and
// a backend still loading its model fails the backend check. Warnings (a
// manifest not produced yet, less free space than the run may write) do
// not fail it.
func Preflight(ctx context.Context, cfg Config) error {
	rep := run(ctx, cfg, true)
	if !rep.Failed() {
		return nil
	}
	return &PreflightError{Report: rep}
}

// PreflightError is returned by Preflight when a check failed. Report
// holds every check that ran, for printing.
type PreflightError struct {
	Report Report
}

func (e *PreflightError) Error() string {
	f := e.Report.failures()
	return fmt.Sprintf("preflight: %d check(s) failed: %s", len(f), strings.Join(f, "; "))
}

func run(ctx context.Context, cfg Config, preflightOnly bool) Report {
	if err := cfg.Validate(); err != nil {
		return Report{Checks: []Result{{Name: "config", Status: Fail, Detail: err.Error(), Fix: "correct the flags"}}}
	}
	s := newSession(cfg.withDefaults())
	defer s.close()
	var rep Report
	for _, c := range checks {
		if preflightOnly && !c.preflight {
			continue
		}
		var r Result
		if err := ctx.Err(); err != nil {
			r = skip("not run: %v", err)
		} else {
			cctx, cancel := context.WithTimeout(ctx, c.timeout(s.cfg))
			r = c.run(cctx, s)
			cancel()
		}
		r.Name = c.name
		r.Detail = s.scrub(r.Detail)
		r.Fix = s.scrub(r.Fix)
		s.done[c.name] = r.Status
		rep.Checks = append(rep.Checks, r)
	}
	return rep
}

package requeue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// ReconcileConfig names a run, its input file and its output files. Every
// field but DryRun and Options is required.
type ReconcileConfig struct {
	// Run names the run.
	Run string
	// PromptsFile is the JSONL input the run was produced from. It is
	// read once, line by line, and never held in memory whole.
	PromptsFile string
	// CompletionsFile and FailedFile are the run's output files as the
	// aggregator writes them (<data-dir>/<run>/completions.jsonl and
	// failed.jsonl). A file that does not exist yet counts as empty.
	CompletionsFile, FailedFile string
	// DryRun reports what would be requeued and changes nothing.
	DryRun bool
	// Options tune the requests to the server.
	Options Options
}

// Validate checks the configuration without reading files or asking the
// server.
func (c ReconcileConfig) Validate() error {
	if err := schema.ValidateRun(c.Run); err != nil {
		return err
	}
	if c.PromptsFile == "" {
		return errors.New("no prompts file given: name the JSONL file the run was produced from")
	}
	if c.CompletionsFile == "" || c.FailedFile == "" {
		return errors.New("the run's completions and failed files must both be named (the aggregator writes them to <data-dir>/<run>/)")
	}
	return c.Options.Validate()
}

// ReconcileReport counts where every unit of the input stands (each
// prompt times the run's samples), and what was (or with DryRun would
// be) requeued.
type ReconcileReport struct {
	Run         string
	PromptsFile string
	DryRun      bool
	// Lines counts the lines of the input, blank ones included; Input the
	// valid prompts among them; Invalid the others (not parsable, or a
	// repeated id), which are ignored. InvalidLines describes the first.
	Lines, Input, Invalid int
	InvalidLines          []string
	// Samples is the run's sample count (1 without --samples), and Units
	// the units of the input: Input times Samples.
	Samples, Units int
	// Total is the unit count of the run's manifest (prompts times
	// samples), for comparison with Units.
	Total int
	// CompletionsFile and FailedFile are the output files read; a file
	// that does not exist yet counts as empty and is listed in
	// MissingFiles.
	CompletionsFile, FailedFile string
	MissingFiles                []string
	// Completed and Failed count units with a line in completions.jsonl
	// or failed.jsonl.
	Completed, Failed int
	// AwaitingResult and AwaitingDeadLetter count units in neither file
	// whose answer or dead letter is stored: they wait for the aggregator.
	AwaitingResult, AwaitingDeadLetter int
	// InFlight and Queued count units a worker holds or will get (see
	// Classify).
	InFlight, Queued int
	// RequeuedMissing counts units requeued because the prompts stream
	// held no message for them; RequeuedSettled those whose message was
	// settled with no answer or dead letter left anywhere.
	RequeuedMissing, RequeuedSettled int
	// FirstRequeued are the first units requeued.
	FirstRequeued []schema.Unit
}

// AwaitingAggregation counts units whose outcome is stored and not yet
// written by the aggregator.
func (r *ReconcileReport) AwaitingAggregation() int { return r.AwaitingResult + r.AwaitingDeadLetter }

// Requeued counts units requeued (or that would be).
func (r *ReconcileReport) Requeued() int { return r.RequeuedMissing + r.RequeuedSettled }

// Reconcile compares a run's input with its output, unit by unit: each
// valid prompt of the input times the run's samples (the manifest's
// SampleCount). It puts back to work every unit that is in neither
// completions.jsonl nor failed.jsonl, has no answer or dead letter
// waiting for the aggregator, and is neither queued nor in flight. That
// makes the run complete even when the broker lost prompts (a store lost
// on a host) or lost an answer after the prompt was acknowledged.
//
// A unit is requeued as it was queued: its prompt message is read back
// from the prompts stream when it is there (settled), or else from
// another sample of the same prompt; only a unit with neither is rebuilt
// from its input record, with the record's id, messages and params, as
// the run's turns mode reads them (see dataset.ParseLineWith).
//
// The output files are read first, then the state of the workers'
// consumer, then which units have an answer or a dead letter stored,
// then the message of each unit still unaccounted for, in that order: a
// unit settled after the consumer was read is seen as in flight, never
// as settled without output. The report is returned whenever the input
// could be opened, errors included. Reconcile stops at the first unit
// it cannot requeue, and when ctx ends; running it again continues.
func Reconcile(ctx context.Context, js jetstream.JetStream, cfg ReconcileConfig) (*ReconcileReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep := &ReconcileReport{
		Run: cfg.Run, PromptsFile: cfg.PromptsFile, DryRun: cfg.DryRun,
		CompletionsFile: cfg.CompletionsFile, FailedFile: cfg.FailedFile,
	}
	f, err := os.Open(cfg.PromptsFile)
	if err != nil {
		return nil, fmt.Errorf("open prompts file: %w", err)
	}
	defer f.Close()
	completed, err := rep.loadOutput(rep.CompletionsFile)
	if err != nil {
		return nil, err
	}
	failed, err := rep.loadOutput(rep.FailedFile)
	if err != nil {
		return nil, err
	}
	r, err := New(ctx, js, cfg.Run, cfg.Options)
	if err != nil {
		return nil, err
	}
	rep.Total, rep.Samples = r.Manifest().Total, r.Manifest().SampleCount()
	rc := &reconciler{r: r, cfg: cfg, rep: rep, completed: completed, failed: failed,
		seen: make(map[string]int), source: filepath.Base(cfg.PromptsFile)}
	if rc.workers, err = r.Workers(ctx); err != nil {
		return rep, err
	}
	if rc.answered, err = r.storedTokens(ctx, r.results, schema.ResultsRoot); err != nil {
		return rep, err
	}
	if rc.deadLettered, err = r.storedTokens(ctx, r.dead, schema.DeadRoot); err != nil {
		return rep, err
	}
	// The input is read as produce read it: in the run's turns mode, so
	// that ids derived from the content are the ones queued.
	rd, err := dataset.NewReader(f, dataset.ParseOptions{Turns: r.Manifest().TurnsMode(), Model: r.Manifest().Model, Task: r.Manifest().Task})
	if err != nil {
		return rep, fmt.Errorf("%s: %w", cfg.PromptsFile, err)
	}
	defer rd.Close()
	return rep, rc.run(ctx, rd)
}

func (rep *ReconcileReport) loadOutput(path string) (idSet, error) {
	keys, found, err := outputUnits(path)
	if err != nil {
		return nil, err
	}
	if !found {
		rep.MissingFiles = append(rep.MissingFiles, path)
	}
	return keys, nil
}

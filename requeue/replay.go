package requeue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// MaxListed bounds the ids and problems a report lists by name; the counts
// are always complete.
const MaxListed = 10

// Reasons are the dead-letter reason classes a replay can select: every
// class a dead letter can have.
var Reasons = schema.Reasons

// ReplayConfig chooses the dead letters of a run to put back to work.
// Run is required; the zero value of every other field selects every dead
// letter of the run and replays it.
type ReplayConfig struct {
	// Run names the run.
	Run string
	// Reasons selects dead letters by reason class (see Reasons); empty
	// selects every class.
	Reasons []string
	// IDsFile, if set, selects the dead letters of the prompt ids it
	// lists, one per line: plain text, a JSON string, or a JSON object with
	// "id" (failed.jsonl, or lines taken from it, will do). An id selects
	// every sample of the prompt; an object with a "sample" too (as
	// failed.jsonl's lines have) only that one. With Reasons too, a dead
	// letter must match both.
	IDsFile string
	// DryRun reports what would be replayed and changes nothing.
	DryRun bool
	// MaxTokens, when positive, is the max_tokens the replayed prompts
	// are generated with instead of the run's (for answers cut short).
	MaxTokens int
	// Options tune the requests to the server.
	Options Options
}

// Validate checks the configuration without reading files or asking the
// server.
func (c ReplayConfig) Validate() error {
	if err := schema.ValidateRun(c.Run); err != nil {
		return err
	}
	for _, reason := range c.Reasons {
		if !slices.Contains(Reasons, reason) {
			return fmt.Errorf("reason %q is not a dead-letter reason class: use %s", reason, strings.Join(Reasons, ", "))
		}
	}
	return c.Options.Validate()
}

// ReplayReport counts what a replay did, or with DryRun would do.
type ReplayReport struct {
	Run    string
	DryRun bool
	// Read counts the run's dead letters by reason class.
	Read map[string]int
	// Unreadable counts dead letters that could not be decoded; Problems
	// names them.
	Unreadable int
	// NotSelected counts the dead letters left out by the reasons or ids
	// chosen.
	NotSelected int
	// Replayed counts the units (prompt and sample) queued again (or that
	// would be), by reason class.
	Replayed map[string]int
	// Resumed counts, among those replayed, units that an interrupted
	// replay had already queued again: only their dead letters were left
	// to remove.
	Resumed int
	// Completed counts selected dead letters whose unit has an answer in
	// the results stream: it is done, so it is skipped.
	Completed int
	// Unreplayable counts selected dead letters that hold no prompt to
	// send (poison: the prompt message could not be decoded); Problems
	// names them.
	Unreplayable int
	// FirstUnits are the first units replayed (or that would be).
	FirstUnits []schema.Unit
	// IDsNotFound name the first selections of the ids file (an id, or an
	// id and a sample) that have no dead letter in the run, NumIDsNotFound
	// how many there are in all.
	IDsNotFound    []string
	NumIDsNotFound int
	// Problems describe the first unreadable or unreplayable dead letters.
	Problems []string
}

// NumReplayed is the number of units replayed (or that would be).
func (r *ReplayReport) NumReplayed() int { return sum(r.Replayed) }

// Replay puts the selected dead letters of a run back to work, each on
// its own: a dead letter is one unit (prompt and sample). For each,
// unless the unit already has an answer, it rebuilds the prompt from the
// dead letter, with its sample and its own parameters, and calls
// Requeue; the other samples of the prompt are left alone. Dead letters
// are read without consuming them (see eachDeadLetter). The report is
// returned whenever the run could be read, errors included.
//
// Replay stops at the first unit it cannot requeue (Requeue has already
// retried what could be retried): what was replayed stays replayed, and
// running Replay again continues with the rest. It stops, between two
// units, when ctx ends.
func Replay(ctx context.Context, js jetstream.JetStream, cfg ReplayConfig) (*ReplayReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var wanted map[string]bool // selection key -> found among the dead letters
	var order []selection
	if cfg.IDsFile != "" {
		sels, err := readIDs(cfg.IDsFile)
		if err != nil {
			return nil, err
		}
		if len(sels) == 0 {
			return nil, fmt.Errorf("ids file %s lists no id: give one prompt id per line, or leave out the ids file to select by reason alone", cfg.IDsFile)
		}
		wanted = make(map[string]bool, len(sels))
		for _, sel := range sels {
			wanted[sel.key()] = false
		}
		order = sels
	}
	r, err := New(ctx, js, cfg.Run, cfg.Options)
	if err != nil {
		return nil, err
	}
	rep := &ReplayReport{Run: cfg.Run, DryRun: cfg.DryRun, Read: map[string]int{}, Replayed: map[string]int{}}
	err = r.eachDeadLetter(ctx, func(s storedDeadLetter) error {
		return r.replayOne(ctx, cfg, wanted, rep, s)
	})
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("replay interrupted (%w): what was replayed stays replayed; run the replay again to continue", err)
		}
		return rep, err
	}
	for _, sel := range order {
		if !wanted[sel.key()] {
			rep.NumIDsNotFound++
			if len(rep.IDsNotFound) < MaxListed {
				rep.IDsNotFound = append(rep.IDsNotFound, sel.String())
			}
		}
	}
	return rep, nil
}

// replayOne decides about one dead letter: the one place where each is
// counted.
func (r *Requeuer) replayOne(ctx context.Context, cfg ReplayConfig, wanted map[string]bool, rep *ReplayReport, s storedDeadLetter) error {
	if s.err != nil {
		rep.Unreadable++
		rep.problem(fmt.Sprintf("%s: unreadable dead letter: %v", s.subject, s.err))
		return nil
	}
	d := s.letter
	u := d.Unit()
	rep.Read[d.Reason]++
	matched := false
	for _, sel := range []selection{{id: d.ID}, {id: d.ID, sample: d.Sample, one: true}} {
		if _, ok := wanted[sel.key()]; ok {
			wanted[sel.key()], matched = true, true
		}
	}
	if (len(cfg.Reasons) > 0 && !slices.Contains(cfg.Reasons, d.Reason)) || (wanted != nil && !matched) {
		rep.NotSelected++
		return nil
	}
	if d.ID == "" || (len(d.Messages) == 0 && len(d.InputIDs) == 0) {
		rep.Unreplayable++
		rep.problem(fmt.Sprintf("%s (id %q, reason %s): holds no prompt to send again: the prompt message could not be decoded; its raw bytes are in the dead letter's body", s.subject, d.ID, d.Reason))
		return nil
	}
	answer, err := r.resultOf(ctx, u)
	if err != nil {
		return fmt.Errorf("replay stopped at %s: %w; what was replayed stays replayed: run the replay again to continue", unitName(u), err)
	}
	if answer == readableResult {
		rep.Completed++
		return nil
	}
	if !cfg.DryRun {
		if answer == unreadableResult {
			// The prompt's answer was stored but cannot be read (its dead
			// letter says poison): it must go, or the new answer could not
			// be stored on its subject.
			if err := r.dropResult(ctx, u); err != nil {
				return fmt.Errorf("replay stopped at %s: %w; what was replayed stays replayed: run the replay again to continue", unitName(u), err)
			}
		}
		p := &schema.Prompt{Run: r.run, ID: d.ID, Sample: d.Sample, Messages: d.Messages, Params: d.Params, MaxTokens: cfg.MaxTokens,
			InputIDs: d.InputIDs, LossMask: d.LossMask}
		outcome, err := r.Requeue(ctx, p)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return err
			}
			return fmt.Errorf("replay stopped at %s: %w; what was replayed stays replayed: run the replay again to continue", unitName(u), err)
		}
		if outcome == AlreadyQueued {
			rep.Resumed++
		}
	}
	rep.Replayed[d.Reason]++
	if len(rep.FirstUnits) < MaxListed {
		rep.FirstUnits = append(rep.FirstUnits, u)
	}
	return nil
}

func (rep *ReplayReport) problem(s string) {
	if len(rep.Problems) < MaxListed {
		rep.Problems = append(rep.Problems, s)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

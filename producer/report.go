package producer

import (
	"fmt"
	"strings"
	"time"
)

// Limits on how problems are kept and shown.
const (
	// MaxProblems bounds Report.Problems, so that a file of a million bad
	// lines does not hold a million reasons in memory; Report.Invalid and
	// Report.Failed still count every one.
	MaxProblems = 10000
	// shownProblems is how many problems an error message lists before
	// "... and N more".
	shownProblems = 20
)

// Problem is one line that was not published, and why.
type Problem struct {
	// File is the prompts file as it was named in Config.PromptsFile.
	File string
	// Line is the 1-based line number.
	Line   int
	Reason string
}

// String formats the problem as FILE:LINE: reason, which editors and
// terminals turn into a link to the line.
func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Reason) }

// Report says what a produce did. Run and Validate return it even when
// they also return an error, with the counts reached so far.
type Report struct {
	// Lines counts every line read, blank ones (which are skipped)
	// included; Valid+Invalid is the number of non-blank lines.
	Lines, Valid, Invalid int
	// Samples is the number of samples per prompt (Config.Samples, at
	// least 1) and Units the prompt messages the valid prompts make:
	// Valid x Samples, the output lines the run expects. Turns is the
	// number of requests they take when every turn succeeds: Units with
	// --turns last, the turns of every conversation (schema.TurnSlots)
	// times Samples with --turns all.
	Samples, Units, Turns int
	// Published counts prompt messages (units: a prompt's samples) stored
	// by this produce; with one sample, prompts.
	Published int
	// AlreadyQueued counts prompt messages that an earlier produce of the
	// same run had stored: a repeat is recognised and not stored twice.
	AlreadyQueued int
	// Failed counts prompt messages that could not be published; running
	// produce again publishes exactly those.
	Failed int
	// Problems lists invalid lines and failed prompts in line order, at
	// most MaxProblems of them.
	Problems []Problem
	// PromptsDigest identifies the valid prompts of the file, whatever
	// their order ("v1:" and 64 hex digits; see schema.Manifest), once the
	// validation pass has read the whole file. Run stores it in the run's
	// manifest. Validate's differs from Run's only when a prompt is over
	// the server's max_payload, which only Run can tell.
	PromptsDigest string
	// Hinted counts the valid prompts with a length hint (see
	// dataset.Line.LengthHint), and Order is the order they were queued
	// in (Config.Order, decided).
	Hinted int
	Order  string
	// Tokens and Bytes are, for an extraction run, the valid samples'
	// input tokens and the size of their hidden-states files.
	Tokens, Bytes int64
	// Elapsed is how long the produce took.
	Elapsed time.Duration
}

func (r *Report) addProblem(p Problem) {
	if len(r.Problems) < MaxProblems {
		r.Problems = append(r.Problems, p)
	}
}

// InvalidError is returned when lines are invalid and Config.SkipInvalid
// is false. Nothing was published and no run manifest was written.
type InvalidError struct {
	File string
	// Invalid counts the invalid lines; Problems lists at most MaxProblems.
	Invalid  int
	Problems []Problem
	// Unit names the file's records: "row" for Parquet; the zero value
	// means lines.
	Unit string
	// Extraction is set for the samples of a hidden-states run, which
	// cannot be skipped: each one's idx is its row.
	Extraction bool
}

func (e *InvalidError) Error() string {
	unit := e.Unit
	if unit == "" {
		unit = "line"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s has %d invalid %s, so nothing was published:\n", e.File, e.Invalid, plural(e.Invalid, unit, unit+"s"))
	writeProblems(&b, e.Problems, e.Invalid)
	if e.Extraction {
		fmt.Fprintf(&b, "fix these %ss: an extraction sample's idx is its %s, so none can be skipped without shifting every later one", unit, unit)
		return b.String()
	}
	fmt.Fprintf(&b, "fix these %ss, or skip them (--skip-invalid) to publish the valid ones", unit)
	return b.String()
}

// IncompleteError is returned when some valid prompts could not be
// published (the server refused them or did not answer in time). The
// others are queued; producing again with the same file and run publishes
// the missing ones and only those.
type IncompleteError struct {
	File, Run string
	// Failed counts the prompt messages not published, of Units (Valid
	// prompts times Samples); Problems lists at most MaxProblems of them.
	Failed, Valid  int
	Samples, Units int
	Problems       []Problem
}

func (e *IncompleteError) Error() string {
	var b strings.Builder
	if e.Samples > 1 {
		fmt.Fprintf(&b, "%d of %d samples (%d prompts x %d) of %s were not published to run %s:\n", e.Failed, e.Units, e.Valid, e.Samples, e.File, e.Run)
	} else {
		fmt.Fprintf(&b, "%d of %d prompts of %s were not published to run %s:\n", e.Failed, e.Valid, e.File, e.Run)
	}
	writeProblems(&b, e.Problems, e.Failed)
	b.WriteString("run the same produce again once the cause is fixed: prompts already queued are recognised and skipped, only the missing ones are published")
	return b.String()
}

// writeProblems lists the first problems, one per line, then how many
// more there are out of total.
func writeProblems(b *strings.Builder, problems []Problem, total int) {
	shown := min(len(problems), shownProblems)
	for _, p := range problems[:shown] {
		fmt.Fprintf(b, "  %s\n", p)
	}
	if total > shown {
		fmt.Fprintf(b, "  ... and %d more\n", total-shown)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

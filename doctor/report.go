package doctor

import (
	"fmt"
	"io"
	"strings"
)

// Status is the outcome of one check.
type Status int

const (
	// Pass: what the check looked at is as a run needs it.
	Pass Status = iota + 1
	// Warn: the run can start, but something deserves a look (a stream not
	// created yet, less free space than the run may write).
	Warn
	// Fail: the run would fail or misbehave; Fix says what to do.
	Fail
	// Skip: the check needs something that was not given or not available
	// (no --backend, no --run, no manifest yet, an earlier check failed);
	// Detail says what.
	Skip
)

// String is the four-letter form printed in reports: PASS, WARN, FAIL or
// SKIP.
func (s Status) String() string {
	switch s {
	case Pass:
		return "PASS"
	case Warn:
		return "WARN"
	case Fail:
		return "FAIL"
	case Skip:
		return "SKIP"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Result is the outcome of one check.
type Result struct {
	// Name is the check's short name, e.g. "nats" or "model".
	Name   string
	Status Status
	// Detail says what was found, on one line.
	Detail string
	// Fix says what to do about a failure or warning; empty when there is
	// nothing to do.
	Fix string
}

// Report is the outcome of every check, in the order they ran.
type Report struct {
	Checks []Result
}

// Failed reports whether any check failed. Warnings and skipped checks
// are not failures.
func (r Report) Failed() bool {
	return r.Count(Fail) > 0
}

// Count returns how many checks ended with status s.
func (r Report) Count(s Status) int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == s {
			n++
		}
	}
	return n
}

// Result returns the result of the check named name, and whether it ran.
func (r Report) Result(name string) (Result, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Result{}, false
}

// Print writes one line per check, "STATUS  name  detail", with the
// names aligned; a failure or warning that has a fix is followed by an
// indented "fix: ..." line. A last line counts the outcomes. Line breaks
// inside a detail or fix are flattened, so each check stays one line.
func (r Report) Print(w io.Writer) {
	width := 0
	for _, c := range r.Checks {
		width = max(width, len(c.Name))
	}
	var b strings.Builder
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%s  %-*s  %s\n", c.Status, width, c.Name, oneLine(c.Detail))
		if c.Fix != "" && (c.Status == Fail || c.Status == Warn) {
			fmt.Fprintf(&b, "%*s  fix: %s\n", len("PASS"), "", oneLine(c.Fix))
		}
	}
	fmt.Fprintf(&b, "%d passed, %d failed, %s, %d skipped\n",
		r.Count(Pass), r.Count(Fail), plural(r.Count(Warn), "warning"), r.Count(Skip))
	_, _ = io.WriteString(w, b.String())
}

// failures lists the failed checks as "name: detail (fix: ...)", for an
// error message.
func (r Report) failures() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status != Fail {
			continue
		}
		s := c.Name + ": " + oneLine(c.Detail)
		if c.Fix != "" {
			s += " (fix: " + oneLine(c.Fix) + ")"
		}
		out = append(out, s)
	}
	return out
}

// oneLine joins the lines of s with spaces.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

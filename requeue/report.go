package requeue

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/aerie-dev/aerie/schema"
)

// String is the replay report as printed at the end of `aerie replay`.
func (r *ReplayReport) String() string {
	var b strings.Builder
	read := sum(r.Read) + r.Unreadable
	if read == 0 {
		fmt.Fprintf(&b, "run %s has no dead letters: nothing to replay\n", r.Run)
	} else {
		fmt.Fprintf(&b, "run %s: %d dead letters%s\n", r.Run, read, byReason(r.Read, r.Unreadable))
		verb, skip := "replayed", "skipped"
		if r.DryRun {
			verb, skip = "would replay", "would skip"
		}
		parts := []string{fmt.Sprintf("%s %d%s", verb, r.NumReplayed(), byReason(r.Replayed, 0))}
		if r.Completed > 0 {
			parts = append(parts, fmt.Sprintf("%s %d already completed", skip, r.Completed))
		}
		if n := r.Unreplayable + r.Unreadable; n > 0 {
			parts = append(parts, fmt.Sprintf("%d cannot be replayed", n))
		}
		if r.NotSelected > 0 {
			parts = append(parts, fmt.Sprintf("%d not selected", r.NotSelected))
		}
		fmt.Fprintln(&b, strings.Join(parts, ", "))
	}
	if r.Resumed > 0 {
		fmt.Fprintf(&b, "%d of them had been queued by an interrupted replay; only their dead letters were removed\n", r.Resumed)
	}
	if len(r.FirstUnits) > 0 {
		fmt.Fprintf(&b, "first ids: %s\n", listUnits(r.FirstUnits, r.NumReplayed()))
	}
	if r.NumIDsNotFound > 0 {
		fmt.Fprintf(&b, "%d ids of the ids file have no dead letter in run %s: %s\n", r.NumIDsNotFound, r.Run, listNames(r.IDsNotFound, r.NumIDsNotFound))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	if r.DryRun {
		fmt.Fprintln(&b, "dry run: nothing changed")
	} else if r.NumReplayed() > 0 {
		fmt.Fprintf(&b, "the aggregator takes their lines out of failed.jsonl and writes their new outcomes: if it has exited (--exit-when-done), start it again: aerie aggregate --run %s\n", r.Run)
	}
	return b.String()
}

// String is the reconcile report as printed at the end of `aerie
// reconcile`.
func (r *ReconcileReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "input: %d prompts in %s (%d lines, %d invalid and ignored)", r.Input, r.PromptsFile, r.Lines, r.Invalid)
	if r.Samples > 1 {
		fmt.Fprintf(&b, ", %d samples each: %d units", r.Samples, r.Units)
	}
	fmt.Fprintln(&b)
	verb := "requeued"
	if r.DryRun {
		verb = "would requeue"
	}
	fmt.Fprintf(&b, "completed %d, failed %d, awaiting aggregation %d, in flight %d, queued %d, %s %d (%d missing from the stream, %d settled without output)\n",
		r.Completed, r.Failed, r.AwaitingAggregation(), r.InFlight, r.Queued, verb, r.Requeued(), r.RequeuedMissing, r.RequeuedSettled)
	if len(r.FirstRequeued) > 0 {
		fmt.Fprintf(&b, "first ids: %s\n", listUnits(r.FirstRequeued, r.Requeued()))
	}
	if r.AwaitingAggregation() > 0 {
		fmt.Fprintf(&b, "note: %d answers and %d dead letters are stored but not yet written to the output: is `aerie aggregate --run %s` running?\n", r.AwaitingResult, r.AwaitingDeadLetter, r.Run)
	}
	for _, f := range r.MissingFiles {
		fmt.Fprintf(&b, "note: %s does not exist yet (counted as empty): check --data-dir if the aggregator has written output\n", f)
	}
	if r.Total > 0 && r.Units != r.Total {
		if r.Samples > 1 {
			fmt.Fprintf(&b, "note: the input has %d valid prompts, %d units with %d samples each; the manifest of run %s counts %d: is this the file the run was produced from?\n", r.Input, r.Units, r.Samples, r.Run, r.Total)
		} else {
			fmt.Fprintf(&b, "note: the input has %d valid prompts, the manifest of run %s counts %d: is this the file the run was produced from?\n", r.Input, r.Run, r.Total)
		}
	}
	for _, l := range r.InvalidLines {
		fmt.Fprintf(&b, "  invalid: %s\n", l)
	}
	if r.DryRun {
		fmt.Fprintln(&b, "dry run: nothing changed")
	}
	return b.String()
}

// byReason formats counts by reason class, in name order: " (permanent 3,
// retries-exhausted 9)".
func byReason(counts map[string]int, unreadable int) string {
	var parts []string
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		if counts[reason] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", reason, counts[reason]))
		}
	}
	if unreadable > 0 {
		parts = append(parts, fmt.Sprintf("unreadable %d", unreadable))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// listUnits names units (see unitName) and says how many more there are.
func listUnits(units []schema.Unit, total int) string {
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = unitName(u)
	}
	return listNames(names, total)
}

// listNames joins names and says how many more there are.
func listNames(names []string, total int) string {
	s := strings.Join(names, ", ")
	if more := total - len(names); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

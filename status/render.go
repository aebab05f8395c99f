package status

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/aerie-dev/aerie/bytesize"
	"github.com/aerie-dev/aerie/schema"
)

// WriteRun writes st as one screen: the run's counts, rates and ETA, its
// queue and aggregator, then one line per worker.
func WriteRun(w io.Writer, st *Run) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s  model %s  phase %s  %s\n", st.Run, orDash(st.Model), phaseOf(st.Phase), eventNote(st.Event, st.Run))
	sched := fmt.Sprintf("priority %d  weight %g", st.Priority, st.Weight)
	if st.Paused {
		sched += "  PAUSED: workers pull none of its prompts (aerie runs set " + st.Run + " --resume)"
	}
	fmt.Fprintf(tw, "schedule\t%s\n", sched)
	if len(st.Needs) > 0 {
		fmt.Fprintf(tw, "needs\t%s  (produced by aerie %s)\n", strings.Join(st.Needs, ", "), orDash(st.WrittenBy))
	}
	fmt.Fprintf(tw, "completed\t%s / %s%s%s\n", count(st.Completed), count(st.Total), percent(st.Completed, st.Total), eventAge(st))
	fmt.Fprintf(tw, "failed\t%s%s\n", count(st.Failed), reasons(st.FailedByReason))
	if st.Truncated > 0 {
		fmt.Fprintf(tw, "truncated\t%s (kept, finish_reason length)\n", count(st.Truncated))
	}
	if st.HintedAnswers >= 3 {
		fmt.Fprintf(tw, "hints\tlength hints: %s\n", HintNote(st.HintRankCorrelation, st.HintedAnswers))
	}
	now := ""
	if eventAge(st) != "" {
		now = "  (now)"
	}
	fmt.Fprintf(tw, "in flight\t%s on %d live worker%s  queued %s  redelivered %s%s\n", count(st.InFlight), st.LiveWorkers, plural(st.LiveWorkers),
		count(int(st.Queue.Pending)), count(st.Queue.Redelivered), now)
	if s := st.Stranded; s != nil {
		fmt.Fprintf(tw, "stranded\t%s held by %s, silent: back in the queue within %s (AckWait %s)\n", count(s.Prompts),
			strings.Join(s.Workers, ", "), Duration(s.BackInSec), Duration(s.AckWaitSec))
	}
	tokFrom := ""
	if st.TokensPerSecFrom == "heartbeats" {
		tokFrom = " (workers' heartbeats)"
	}
	fmt.Fprintf(tw, "rate\t%s req/s  %s tok/s%s  (overall %s req/s, %s tok/s)\n", rate(st.RequestsPerSec), count(int(st.TokensPerSec+0.5)), tokFrom,
		rate(st.RequestsPerSecOverall), count(int(st.TokensPerSecOverall+0.5)))
	if st.Task == schema.TaskHiddenStates {
		fmt.Fprintf(tw, "hidden states\t%s of %s written%s  %s/s  (tokens above are input tokens extracted)\n",
			bytesize.Format(st.HiddenStatesBytes), bytesize.Format(st.HiddenStatesBytesTotal), percent64(st.HiddenStatesBytes, st.HiddenStatesBytesTotal),
			bytesize.Format(int64(st.HiddenStatesBytesPerSec)))
	}
	eta := FormatETA(st.ETASec, st.ETALowSec, st.ETAHighSec, st.Phase)
	switch {
	case st.Stranded != nil && st.ETASec < 0:
		eta += fmt.Sprintf(", at least %s: the %s stranded prompts are back then", Duration(st.Stranded.BackInSec), count(st.Stranded.Prompts))
	case st.Stranded != nil:
		eta += fmt.Sprintf("  (no sooner than the %s stranded prompts are back)", count(st.Stranded.Prompts))
	}
	if st.Event != nil {
		eta += "  elapsed " + Duration(st.ElapsedSec)
	}
	if note := StragglerNote(st.Stragglers); note != "" && st.Phase != schema.PhaseDone {
		eta += "  " + note
	}
	fmt.Fprintf(tw, "ETA\t%s\n", eta)
	fmt.Fprintf(tw, "aggregator\t%s\n", aggregatorNote(st))
	if len(st.AggregatorLacks) > 0 {
		fmt.Fprintf(tw, "AGGREGATOR\tLACKS %s: aerie %s writes nothing of the run; upgrade it to aerie %s or later\n",
			strings.Join(st.AggregatorLacks, ", "), orDash(st.AggregatorVersion), orDash(st.AggregatorLacksWrittenBy))
	}
	if note := lackingWorkers(st); note != "" {
		fmt.Fprintf(tw, "UPGRADE\t%s\n", note)
	}
	if st.WriteError != "" {
		fmt.Fprintf(tw, "OUTPUT\tNOT WRITTEN: %s\n", st.WriteError)
	}
	if st.Unwritten > 0 {
		fmt.Fprintf(tw, "UNWRITTEN\t%s lines will never come: nothing is queued, in flight or waiting to be written (another --data-dir, deleted files, or lost prompts; the aggregator's log says how to get them back)\n", count(st.Unwritten))
	}
	if len(st.Queue.Missing) > 0 {
		fmt.Fprintf(tw, "consumers\tmissing: %s\n", strings.Join(st.Queue.Missing, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeWorkers(w, st)
}

func writeWorkers(w io.Writer, st *Run) error {
	if len(st.Workers) == 0 {
		_, err := fmt.Fprintf(w, "no worker heartbeat kept: no worker has started (aerie work --run %s)\n", st.Run)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tVERSION\tHOST\tBACKEND\tWINDOW\tIN FLIGHT\tTOK/S\tHEARTBEAT\tSTATE")
	for _, wk := range st.Workers {
		tok := "-"
		if wk.TokensPerSec >= 0 {
			tok = count(int(wk.TokensPerSec + 0.5))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s%s\t%s\t%s ago\t%s\n", wk.Name, orDash(wk.Version), orDash(wk.Host), orDash(wk.Backend), wk.Window,
			count(wk.InFlight), share(wk), tok, Duration(wk.Heartbeat.AgeSec), workerState(wk))
	}
	if st.WorkersNotShown > 0 {
		fmt.Fprintf(tw, "(%d older stale workers not shown)\n", st.WorkersNotShown)
	}
	return tw.Flush()
}

// eventAge says, on the line of the figures that come from the
// aggregator's last event, how old they are when that is old enough to
// disagree with the live queue below them: " (as of the event 3s ago)".
func eventAge(st *Run) string {
	if st.Event == nil || st.Event.AgeSec < 2 || st.Phase == schema.PhaseDone {
		return ""
	}
	return "  (as of the event " + Duration(st.Event.AgeSec) + " ago)"
}

// share is the run's share of a worker's window, when the worker gives
// it less than all of it: " (40%)".
func share(wk Worker) string {
	if wk.Window <= 0 || wk.InFlight >= wk.Window || wk.InFlight == 0 && wk.Held == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d%%)", 100*wk.InFlight/wk.Window)
}

func workerState(wk Worker) string {
	hedges := ""
	if wk.Hedges > 0 {
		hedges = fmt.Sprintf(", hedged %d (won %d)", wk.Hedges, wk.HedgesWon)
	}
	switch {
	case wk.Heartbeat.Stale && wk.Paused == schema.PausedStopping:
		return "stopped" + hedges
	case wk.Heartbeat.Stale && wk.BackInSec > 0:
		return "STALE (no heartbeat for " + Duration(wk.Heartbeat.AgeSec) + "; its " + count(wk.Held) + " prompts back within " + Duration(wk.BackInSec) + ")" + hedges
	case wk.Heartbeat.Stale:
		return "STALE (no heartbeat for " + Duration(wk.Heartbeat.AgeSec) + ")" + hedges
	case wk.Paused != "":
		return "paused: " + wk.Paused + hedges
	case wk.Holding != "":
		return "holding back: " + wk.Holding + hedges
	}
	return "ok" + hedges
}

// WriteList writes one line per run.
func WriteList(w io.Writer, lines []Line) error {
	if len(lines) == 0 {
		_, err := fmt.Fprintln(w, "no run on this server yet: `aerie produce` creates one (or check --nats)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tPHASE\tCOMPLETED\tFAILED\tETA\tLAST EVENT")
	for _, l := range lines {
		if l.Problem != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\n", l.Run, l.Problem)
			continue
		}
		last := "none"
		if l.Event != nil {
			last = Duration(l.Event.AgeSec) + " ago"
			if l.Event.Stale {
				last += " (stale)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%s\n", l.Run, phaseOf(l.Phase), count(l.Completed), count(l.Total),
			count(l.Failed), FormatETA(l.ETASec, l.ETALowSec, l.ETAHighSec, l.Phase), last)
	}
	return tw.Flush()
}

// FormatETA says when a run ends: "done", "unknown", or the estimate
// with its band when the band says more, as in "1h12m (58m–1h31m)". A
// band that does not hold the estimate (zeros, from an aggregator older
// than the band) is left out.
func FormatETA(eta, low, high float64, phase schema.Phase) string {
	switch {
	case phase == schema.PhaseDone:
		return "done"
	case eta < 0:
		return "unknown"
	}
	s := Duration(eta)
	if low >= 0 && low <= eta && eta <= high && (Duration(low) != s || Duration(high) != s) {
		s += " (" + Duration(low) + "–" + Duration(high) + ")"
	}
	return s
}

// StragglerNote says what an ETA set by the run's longest answers waits
// on (schema.Stragglers): "waiting on 1 answer at 11,900 tokens, running
// 2m00s", or that the longest answers are still to come. Empty for nil.
func StragglerNote(s *schema.Stragglers) string {
	if s == nil {
		return ""
	}
	if s.InFlight == 0 {
		return "(set by the longest answers still to come)"
	}
	note := "waiting on " + count(s.InFlight) + " answer"
	if s.InFlight != 1 {
		note += "s"
	}
	if s.LongestTokens > 0 {
		if s.InFlight == 1 {
			note += " at " + count(s.LongestTokens) + " tokens"
		} else {
			note += ", the longest at " + count(s.LongestTokens) + " tokens"
		}
		if s.LongestSec > 0 {
			note += ", running " + Duration(s.LongestSec)
		}
	}
	return note
}

// Duration writes sec for a person, to two units: "45s", "3m05s",
// "12m", "1h12m", "3d4h".
func Duration(sec float64) string {
	n := int64(sec + 0.5)
	switch {
	case n < 60:
		return fmt.Sprintf("%ds", max(n, 0))
	case n < 600:
		return fmt.Sprintf("%dm%02ds", n/60, n%60)
	case n < 3600:
		return fmt.Sprintf("%dm", (n+30)/60)
	case n < 86400:
		m := (n + 30) / 60
		return fmt.Sprintf("%dh%02dm", m/60, m%60)
	}
	h := (n + 1800) / 3600
	return fmt.Sprintf("%dd%dh", h/24, h%24)
}

func eventNote(ev *Age, run string) string {
	switch {
	case ev == nil:
		return "(no throughput event: has an aggregator run? aerie aggregate --run " + run + ")"
	case ev.Stale:
		return "(last event " + Duration(ev.AgeSec) + " ago: STALE, is the aggregator running?)"
	}
	return "(last event " + Duration(ev.AgeSec) + " ago)"
}

// lackingWorkers says which live workers leave the run alone for want
// of its features, and what to upgrade them to; "" when none does.
func lackingWorkers(st *Run) string {
	var names []string
	lacks, by := map[string]bool{}, ""
	for _, wk := range st.Workers {
		if wk.Heartbeat.Stale || len(wk.Lacks) == 0 {
			continue
		}
		names = append(names, wk.Name+" (aerie "+orDash(wk.Version)+")")
		for _, f := range wk.Lacks {
			lacks[f] = true
		}
		if wk.LacksWrittenBy != "" {
			by = wk.LacksWrittenBy
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("%d worker%s lack%s %s and take%s none of the run: %s; upgrade to aerie %s or later",
		len(names), plural(len(names)), verbS(len(names)), strings.Join(slices.Sorted(maps.Keys(lacks)), ", "), verbS(len(names)),
		strings.Join(names, ", "), orDash(by))
}

// verbS is the s of a verb in the present with n subjects: "s" for one.
func verbS(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

func aggregatorNote(st *Run) string {
	a := st.Aggregator
	q := fmt.Sprintf("  to write: %s result%s, %s failure%s", count(int(st.Queue.ResultsToWrite)), plural(int(st.Queue.ResultsToWrite)),
		count(int(st.Queue.FailuresToWrite)), plural(int(st.Queue.FailuresToWrite)))
	switch {
	case a != nil:
		return fmt.Sprintf("%s pid %d writing %s%s", orDash(a.Host), a.PID, orDash(a.Dir), q)
	case st.Phase == schema.PhaseDone:
		return "none running (the run is done)" + q
	}
	return "NONE RUNNING: nothing writes this run's files (aerie aggregate --run " + st.Run + ")" + q
}

func reasons(by map[string]int) string {
	if len(by) == 0 {
		return ""
	}
	parts := make([]string, 0, len(by))
	for _, r := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, r+" "+count(by[r]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func phaseOf(p schema.Phase) string {
	if p == "" {
		return "unknown"
	}
	return string(p)
}

func percent(n, total int) string {
	if total <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f%%)", 100*float64(n)/float64(total))
}

func rate(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// count writes n with thousands separators: 25,000.
func count(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// HintNote says how well length hints ranked n answers: Spearman's rank
// correlation, which longest-first order needs well above 0 to help.
func HintNote(correlation float64, n int) string {
	return fmt.Sprintf("rank correlation %.2f with the tokens taken, over %s answers with a hint", correlation, count(n))
}

// percent64 is " (p%)" of n in total, "" when total is zero.
func percent64(n, total int64) string {
	if total <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%.0f%%)", 100*float64(n)/float64(total))
}

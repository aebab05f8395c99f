package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/hscheck"
)

// Report is what a run did and what came out of it.
type Report struct {
	Config Config
	Kills  Kills
	// Unexpected describes each process that exited without being asked
	// (it was replaced).
	Unexpected []string
	// Races names the process logs holding a data race report (only a
	// binary built with -race writes them).
	Races []string
	// Faults counts the faults the simulator injected, by kind; nil if
	// it could not be asked.
	Faults map[string]int64
	// Outcome is the check of the output files; nil if the run did not
	// get that far. SharedOutcome is the shared run's (Config.Shared).
	Outcome, SharedOutcome *Outcome
	// HiddenStates is a hidden-states run's output read as its trainer
	// will (Config.HiddenStates), nil otherwise or before the end;
	// ServerFilesLeft counts the files the simulator's directory still
	// holds then: attempts abandoned within the workers' orphan age
	// (killed workers' among them), not yet swept.
	HiddenStates    *hscheck.Report
	ServerFilesLeft int
	// DeadLettersChecked is set when every id of failed.jsonl was looked
	// up in AERIE_DEAD (Outcome.Unreplayable).
	DeadLettersChecked bool
	// TurnsStoreChecked is set when AERIE_TURNS was looked at once the
	// run was done (Outcome.LeftoverTurns).
	TurnsStoreChecked bool
	// Requests is what the requests sent to the simulator say about turns
	// generated again; nil when not checked.
	Requests *RequestCheck
	// ConcurrentTurns counts, with --turns all, the turns finished by a
	// delivery after another delivery of the same conversation, running
	// at the same time, had stored them (the workers' logs say so).
	ConcurrentTurns int
	// State is the NATS state, filled in when the run stalled or the
	// output is wrong.
	State string
	Wall  time.Duration
}

// String is the report as a plain block, one figure per line.
func (r *Report) String() string {
	var b strings.Builder
	c := r.Config
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "  %-18s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, "chaos run %s (seed %d)\n", c.Run, c.Seed)
	what := "prompts"
	if c.turnsAll() {
		what = fmt.Sprintf("conversations of 1 to %d user turns, every turn generated (--turns all)", c.Turns)
	}
	if c.Samples > 1 {
		what += fmt.Sprintf(" of %d samples each, a prompt's samples in one request (--samples %d)", c.Samples, c.Samples)
	}
	line("prompts", "%d %s, %d workers at a time (windows %d-%d), simulator at speed %g, first-token and idle timeouts %v, ack wait %v",
		c.Prompts, what, c.Workers, c.WindowMin, c.WindowMax, c.Speed, c.StallTimeout, c.AckWait)
	line("faults asked", "400 %g, 429 %g, 500 %g, 503 %g, hang %g, disconnect %g, stream error %g",
		c.Rate400, c.Rate429, c.Rate500, c.Rate503, c.HangRate, c.DisconnectRate, c.StreamErrorRate)
	if r.Faults != nil {
		line("faults injected", "%s", counts(r.Faults, []string{"400", "429", "500", "503", "hang", "disconnect", "stream_error", "unauthorized"}))
	}
	natsHow := "kill -9"
	if c.NATSStop == StopTerm {
		natsHow = "SIGTERM"
	}
	line("kills", "worker %d (kill -9), aggregator %d (kill -9), nats server %d (%s, restarted on the same port and store)",
		r.Kills.Workers, r.Kills.Aggregators, r.Kills.NATS, natsHow)
	if len(c.ReplaysAt) > 0 {
		line("replays", "%d (aerie replay of every dead letter)", r.Kills.Replays)
	}
	if len(c.SecondAggregatorsAt) > 0 {
		line("second aggregators", "%d started beside the running one, %d gave up as they must", r.Kills.SecondAggregators, r.Kills.Refused)
	}
	if len(c.KeyRotationsAt) > 0 {
		line("key rotations", "%d (the simulator's API key changed, the workers' key file %v later)", r.Kills.KeyRotations, c.KeyFileLag)
	}
	if c.ReplayAfterDone {
		also := ""
		if c.turnsAll() {
			also = fmt.Sprintf(" (%d conversations failed at turn 2 or later, going on after their stored turns)", r.Kills.ReplayedAfterStoredTurns)
		}
		line("replay when done", "%d prompts replayed once the run was done%s, then the aggregator again with --exit-when-done", r.Kills.ReplayedAfterDone, also)
	}
	if c.Shared != "" {
		line("shared run", "%s; %d changes made", sharedLine(c), r.Kills.ScheduleChanges)
		if o := r.SharedOutcome; o != nil {
			line("shared outcome", "%d completed, %d dead-lettered; %d duplicates, %d in both files, %d missing, %d unknown",
				o.Completed, o.Failed, len(o.Duplicates), len(o.InBoth), len(o.Missing), len(o.Unknown))
		}
	}
	line("unexpected exits", "%d", len(r.Unexpected))
	if o := r.Outcome; o != nil {
		line("completed", "%d (%d truncated at max_tokens)", o.Completed, o.Truncated)
		failed := "none"
		if len(o.FailedByReason) > 0 {
			m := map[string]int64{}
			for k, v := range o.FailedByReason {
				m[k] = int64(v)
			}
			failed = counts(m, nil)
		}
		line("dead-lettered", "%d: %s", o.Failed, failed)
		line("duplicates", "%d%s", len(o.Duplicates), sample(o.Duplicates))
		line("in both files", "%d%s", len(o.InBoth), sample(o.InBoth))
		line("missing", "%d%s", len(o.Missing), sample(o.Missing))
		line("unknown ids", "%d%s", len(o.Unknown), sample(o.Unknown))
		line("unparseable", "%d%s", len(o.Unparseable), sample(o.Unparseable))
		line("answered, unwritten", "%d%s", len(o.AnsweredNotWritten), sample(o.AnsweredNotWritten))
		if r.DeadLettersChecked {
			line("unreplayable", "%d (failed without a dead letter)%s", len(o.Unreplayable), sample(o.Unreplayable))
		} else {
			line("unreplayable", "not checked")
		}
		if c.turnsAll() {
			line("turns", "%d conversations, %d turns planned, %d generated and written in %d completed lines, %d stored before the failed turn of %d failed lines",
				o.Conversations, o.TurnsPlanned, o.TurnsWritten, o.Completed, o.TurnsBeforeFailure, o.Failed)
			line("bad turns", "%d (lines whose turns are not the conversation's)%s", len(o.BadTurns), sample(o.BadTurns))
			if r.TurnsStoreChecked {
				line("turns left stored", "%d completed conversations%s; %d failed ones keep theirs for a replay", len(o.LeftoverTurns), sample(o.LeftoverTurns), o.KeptTurns)
			} else {
				line("turns left stored", "not checked")
			}
			line("turns raced", "%d finished by a delivery after another one running beside it had stored them", r.ConcurrentTurns)
		}
	}
	if hs := r.HiddenStates; hs != nil {
		line("hidden states", "%d rows, %d files verified against their results, %d failed; %d missing, %d differ, %d extra in hidden_states/, %d rows mismatched, %d unaccounted%s",
			hs.Rows, hs.Files, hs.Failed, hs.Missing, hs.Differs, hs.Extra, hs.RowMismatch, hs.Unaccounted, sample(hs.Problems))
		line("server files", "%d left in the simulator's directory (abandoned attempts younger than the orphan age)", r.ServerFilesLeft)
	}
	if q := r.Requests; q != nil {
		line("requests", "%d chat requests sent, %d traced to one turn of one prompt, %d of them for a turn asked for before (kills, faults, restarts)",
			q.Chat, q.Traced, q.Repeated)
		line("regenerated", "%d of %d requests that began a delivery's work asked for a turn already stored or a prompt already answered%s",
			len(q.Regenerated), q.Starts, sample(q.Regenerated))
	} else if r.Outcome != nil {
		line("regenerated", "not checked")
	} else {
		line("output", "not checked: the run did not get that far")
	}
	line("wall time", "%v", r.Wall.Round(100*time.Millisecond))
	line("work dir", "%s", c.Dir)
	if len(r.Races) > 0 {
		line("data races", "%d logs: %s", len(r.Races), strings.Join(r.Races, ", "))
	}
	for _, u := range r.Unexpected {
		fmt.Fprintf(&b, "unexpected exit: %s\n", u)
	}
	if r.State != "" {
		b.WriteString(r.State)
	}
	return b.String()
}

// counts formats a count per kind: the kinds in order first, then any
// others sorted.
func counts(m map[string]int64, order []string) string {
	seen := map[string]bool{}
	var parts []string
	for _, k := range order {
		seen[k] = true
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	var rest []string
	for k := range m {
		if !seen[k] && m[k] != 0 {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// sample shows the first few items of a list that should be empty.
func sample(items []string) string {
	if len(items) == 0 {
		return ""
	}
	const n = 5
	if len(items) <= n {
		return ": " + strings.Join(items, ", ")
	}
	return fmt.Sprintf(": %s, ... (%d more)", strings.Join(items[:n], ", "), len(items)-n)
}

// simFaults asks the simulator what it injected; nil if it cannot.
func simFaults(addr string) map[string]int64 {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/admin/faults")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var rep struct {
		Injected map[string]int64 `json:"injected"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&rep) != nil {
		return nil
	}
	return rep.Injected
}

// raceReports returns the log files in dir that hold a data race report.
func raceReports(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var found []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			found = append(found, filepath.Join(dir, e.Name()))
		}
	}
	return found
}

package runs

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// WriteList writes runs as a table, one line per run, with the age of
// each run's last throughput event as of now.
func WriteList(w io.Writer, runs []Summary, now time.Time) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "no run on this server yet: `aerie produce` creates one (or check --nats)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tMODEL\tPROMPTS\tCREATED\tPRODUCER\tSCHEDULE\tNEEDS\tPROGRESS")
	for _, s := range runs {
		if s.Problem != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%s\n", s.Run, s.Problem)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", s.Run, s.Model, s.Total,
			s.CreatedAt.Local().Format("2006-01-02 15:04"), s.Producer, schedule(s), needs(s.Needs), progress(s.Progress, now))
	}
	return tw.Flush()
}

// schedule is a run's schedule in a few words: "p0 w1", "p5 w3 paused".
func schedule(s Summary) string {
	out := fmt.Sprintf("p%d w%g", s.Priority, s.Weight)
	if s.Paused {
		out += " paused"
	}
	return out
}

// needs is a run's features, comma separated; "-" for none, a run every
// aerie serves.
func needs(f []string) string {
	if len(f) == 0 {
		return "-"
	}
	return strings.Join(f, ",")
}

func progress(p *Progress, now time.Time) string {
	if p == nil {
		return "no throughput event (no aggregator has run, or its events expired)"
	}
	return fmt.Sprintf("%d completed, %d failed, %s, %s ago", p.Completed, p.Failed, p.Phase, age(now.Sub(p.At)))
}

// age rounds d for a person: to the second under an hour, then to the
// minute, and to the hour past a day ("45s", "3m12s", "2h5m", "3d4h").
func age(d time.Duration) string {
	switch {
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 24*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		hours := int(d.Round(time.Hour).Hours())
		return fmt.Sprintf("%dd%dh", hours/24, hours%24)
	}
}

// WritePlan writes what removing the run would remove, and why removing
// it would be refused when it looks alive. It does not say that nothing
// was removed: the caller does, as it decides.
func WritePlan(w io.Writer, r *Removal) error {
	fmt.Fprintf(w, "run %s has on this server:\n", r.Run)
	if err := writeContents(w, r); err != nil {
		return err
	}
	if why := r.Alive(); len(why) > 0 {
		fmt.Fprintf(w, "it looks alive: %s;\nremoving it would be refused: stop its workers and aggregator first, or add --force\n", strings.Join(why, "; "))
	}
	return nil
}

// WriteRemoved writes what Remove removed and where the run's output
// files are, which it does not touch.
func WriteRemoved(w io.Writer, r *Removal) error {
	fmt.Fprintf(w, "removed run %s from this server:\n", r.Run)
	if err := writeContents(w, r); err != nil {
		return err
	}
	dir := "<data-dir>/" + r.Run + " on the aggregator's host"
	if r.Lease != nil && r.Lease.Lease.Dir != "" {
		dir = r.Lease.Lease.Dir + " on " + r.Lease.Lease.Host
	}
	_, err := fmt.Fprintf(w, "files on disk were not touched: the aggregator's output (completions.jsonl, failed.jsonl, events.jsonl) is under %s; remove it yourself if it is no longer needed\n", dir)
	return err
}

// writeContents writes one line per stream, consumer and key of r.
func writeContents(w io.Writer, r *Removal) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, m := range r.Messages {
		fmt.Fprintf(tw, "  stream\t%s\t%s\t%s\n", m.Stream, plural(m.Count, "message"), m.Filter)
	}
	for _, c := range r.Consumers {
		fmt.Fprintf(tw, "  consumer\t%s\t%s\n", c.Stream, c.Name)
	}
	for _, k := range r.Keys {
		fmt.Fprintf(tw, "  KV bucket\t%s\t%s\t%s\n", k.Bucket, plural(k.Count, "key"), keyNote(r, k))
	}
	return tw.Flush()
}

func plural(n uint64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// keyNote says what a key of the run is.
func keyNote(r *Removal, k BucketKeys) string {
	switch k.Bucket {
	case schema.RunsBucket:
		if m := r.Manifest; m != nil {
			return fmt.Sprintf("%s: the manifest (model %s, %d prompts, produced on %s at %s)",
				k.Keys, m.Model, m.Total, m.Producer, m.CreatedAt.Local().Format(time.RFC3339))
		}
		return k.Keys + ": the manifest (unreadable)"
	case schema.AttemptsBucket:
		return k.Keys + ": failures counted per prompt"
	case schema.LeasesBucket:
		return k.Keys + ": the aggregator's lease"
	}
	return k.Keys
}

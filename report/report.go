// Package report writes the end-of-run report of a run: one HTML file,
// self-contained (charts drawn as inline SVG, no script, nothing
// fetched), from the run's output files in <data-dir>/<run>/:
// throughput over time and the ETA against the truth from events.jsonl,
// completion lengths by finish reason, TTFT and latency distributions
// and each worker's share from completions.jsonl, failures by reason
// from failed.jsonl, and the run's parameters from manifest.json.
//
// The files are streamed: a completions.jsonl of a million lines costs a
// few numbers a line in memory, never the lines. A line that cannot be
// read is skipped and counted, so a damaged file still gets a report
// that says how much of it was read.
package report

import (
	"fmt"
	"html/template"
	"io"
	"path/filepath"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// File is the report's name in the run's directory.
const File = "report.html"

// Options say which run to report on.
type Options struct {
	// Run names the run; required.
	Run string
	// Dir is the run's directory, <data-dir>/<run>; required.
	Dir string
	// Settings are more lines for the parameters table, such as what
	// `aerie run` knows of its invocation (workers, window) that the
	// manifest does not hold. None by default. They must hold no
	// secret: they are written as they are.
	Settings []Setting
	// Now is the report's time; zero means time.Now().
	Now time.Time
}

// Setting is a named value of a table.
type Setting struct{ Name, Value string }

// Report is a run's report, built by Build and written by WriteHTML.
type Report struct {
	Run       string
	Generated time.Time
	Dir       string
	// Manifest is nil when manifest.json is absent or unreadable, and
	// ManifestNote then says why.
	Manifest     *schema.Manifest
	ManifestNote string
	Params       []Setting
	Summary      []Setting
	// Done reports whether every unit of the run is completed or failed;
	// Unknown, when it is not, that the run's size is not known either.
	Done, Unknown bool
	// Completed and Failed count the lines read of completions.jsonl and
	// failed.jsonl; Events those of events.jsonl.
	Completed, Failed, Events int
	// Skipped are the files with lines that could not be read.
	Skipped []Skipped
	// Notes say what the report could not show, and why.
	Notes  []string
	Charts []Chart
}

// Chart is one chart of the report: its SVG and a sentence on how to
// read it.
type Chart struct {
	ID, Title, Caption string
	SVG                template.HTML
}

// Build reads the run's files and computes the report.
func Build(opts Options) (*Report, error) {
	if opts.Run == "" || opts.Dir == "" {
		return nil, fmt.Errorf("report: a run name and its directory are required")
	}
	r := &Report{Run: opts.Run, Dir: opts.Dir, Generated: opts.Now}
	if r.Generated.IsZero() {
		r.Generated = time.Now()
	}
	var sc, sf, se Skipped
	c, note, err := readCompletions(opts.Dir, &sc)
	if err != nil {
		return nil, err
	}
	if note != "" {
		r.Notes = append(r.Notes, note)
	}
	f, err := readFailures(opts.Dir, &sf)
	if err != nil {
		return nil, err
	}
	evs, err := readEvents(opts.Dir, &se)
	if err != nil {
		return nil, err
	}
	for _, s := range []Skipped{sc, sf, se} {
		if s.Lines > 0 {
			r.Skipped = append(r.Skipped, s)
		}
	}
	r.Manifest, r.ManifestNote = readManifest(opts.Dir)
	r.Completed, r.Failed, r.Events = c.count, f.count, len(evs)
	if c.count == 0 && f.count == 0 && len(evs) == 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("no %s, %s or %s with a readable line in %s: is --data-dir right, and has an aggregator run for this run?",
			dataset.CompletionsFile, dataset.FailedFile, dataset.EventsFile, opts.Dir))
	}
	r.compute(c, f, evs, opts.Settings)
	return r, nil
}

// WriteFile builds the report of the run and writes it to path, whole or
// not at all.
func WriteFile(path string, opts Options) (*Report, error) {
	r, err := Build(opts)
	if err != nil {
		return nil, err
	}
	if err := dataset.WriteFileAtomic(path, r.WriteHTML); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return r, nil
}

// DefaultPath is where a run's report goes unless told otherwise: beside
// its outputs.
func DefaultPath(dataDir, run string) string { return filepath.Join(dataDir, run, File) }

// WriteHTML writes the report as one HTML page.
func (r *Report) WriteHTML(w io.Writer) error {
	if err := page.Execute(w, r); err != nil {
		return fmt.Errorf("report: write the page: %w", err)
	}
	return nil
}

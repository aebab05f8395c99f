package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/report"
)

const reportSynopsis = `--run NAME [--data-dir D] [--out FILE]

Writes the report of a run as one self-contained HTML file (charts
inline, no script, nothing fetched): throughput over time, completion
lengths by finish reason, TTFT and latency distributions, each worker's
share, the ETA against the time the run really took, the summary and the
run's parameters. It reads <data-dir>/<run>/ (completions.jsonl,
failed.jsonl, events.jsonl, manifest.json) and needs no NATS; it can be
run while the run goes, and says so.`

func cmdReport(_ context.Context, args []string) error {
	fs, lf := newFlags("report", reportSynopsis)
	run := fs.String("run", "", "run name")
	dataDir := addDataDirFlag(fs, aggregator.DefaultDataDir, "")
	out := fs.String("out", "", "HTML file to write (default <data-dir>/<run>/report.html)")
	if _, err := parseRunFlags(fs, lf, args, run); err != nil {
		return err
	}
	dir := filepath.Join(*dataDir, *run)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("no directory %s for run %s: give the --data-dir its aggregator writes to", dir, *run)
	}
	path := *out
	if path == "" {
		path = report.DefaultPath(*dataDir, *run)
	}
	r, err := report.WriteFile(path, report.Options{Run: *run, Dir: dir})
	if err != nil {
		return err
	}
	fmt.Printf("report of run %s (%d completed, %d failed): %s\n", *run, r.Completed, r.Failed, path)
	return nil
}

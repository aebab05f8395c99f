package report_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/report"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/worker"
)

// countLines counts the non-blank lines of a file.
func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

// A real run (embedded NATS, simulator, two workers, some prompts
// refused by the backend and some answers cut at max_tokens) ends with
// its report beside its outputs, and the report's numbers are the
// files'.
func TestReportOfARun(t *testing.T) {
	const n = 150
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	f, err := os.Create(prompts)
	if err != nil {
		t.Fatal(err)
	}
	if err := simulator.WritePrompts(f, n, 3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := pipeline.Run(ctx, pipeline.Config{
		Run: "rep", PromptsFile: prompts, DataDir: data,
		Sim: simulator.Config{Speed: 2000, OutputMedian: 150, MaxNumSeqs: 64,
			Faults: simulator.Faults{Rate400: 0.1}},
		Params:  schema.Params{MaxTokens: 300},
		Workers: 2, Worker: worker.Config{Window: 16, Grace: 100 * time.Millisecond},
		EventInterval: 50 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done {
		t.Fatalf("run not done: %+v", sum)
	}
	runDir := filepath.Join(data, "rep")
	if want := filepath.Join(runDir, report.File); sum.Report != want {
		t.Fatalf("summary names report %q, want %q", sum.Report, want)
	}
	b, err := os.ReadFile(sum.Report)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	checkCharts(t, html)

	completed := countLines(t, filepath.Join(runDir, dataset.CompletionsFile))
	failed := countLines(t, filepath.Join(runDir, dataset.FailedFile))
	if completed+failed != n || failed == 0 {
		t.Fatalf("%d completed and %d failed of %d: want all accounted for, some refused", completed, failed, n)
	}
	for _, want := range []string{
		fmt.Sprintf("<th>completed</th><td>%d (", completed),
		fmt.Sprintf("<th>failed</th><td>%d: permanent %d", failed, failed),
		fmt.Sprintf("<th>expected</th><td>%d answers", n),
		"<th>model</th><td>" + sum.Model + "</td>",
		"<th>sampling</th><td>max_tokens=300</td>",
		"<th>window per worker</th><td>16</td>",
		"<th>workers</th><td>2</td>",
		"finished;",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("report does not hold %q", want)
		}
	}
	if strings.Contains(html, "could not be read") {
		t.Error("report of an intact run says lines were skipped")
	}
	r, err := report.Build(report.Options{Run: "rep", Dir: runDir})
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed != completed || r.Failed != failed || !r.Done || r.Manifest == nil || r.Manifest.Total != n {
		t.Errorf("report read %d completed, %d failed, done %v, manifest %+v; the files hold %d and %d of %d",
			r.Completed, r.Failed, r.Done, r.Manifest, completed, failed, n)
	}
}

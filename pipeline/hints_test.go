package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/pipeline"
)

// Prompts with length hints are queued longest first, so that one worker
// of window 1 answers them in descending hint order; each output line
// carries its hint, and the summary says how well the hints ranked the
// answers.
func TestRunLongestFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hinted.jsonl")
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf(`{"id": "p%02d", "prompt": "question %d", "length_hint": %d}`, i, i, 10*(i%10+1)))
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config(t, "hinted", path)
	cfg.Workers, cfg.Worker.Window = 1, 1
	sum, err := pipeline.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done || sum.HintedAnswers != 30 {
		t.Fatalf("summary %+v, want 30 hinted answers", sum)
	}
	var hints []int
	for _, l := range readOutput(t, sum.Completions) {
		hints = append(hints, l.LengthHint)
	}
	for i := 1; i < len(hints); i++ {
		if hints[i] > hints[i-1] {
			t.Fatalf("answers in hint order %v, want descending", hints)
		}
	}
	if len(hints) != 30 || hints[0] != 100 || hints[29] != 10 {
		t.Errorf("hints %v", hints)
	}
	var out strings.Builder
	sum.Print(&out)
	if !strings.Contains(out.String(), "length hints rank correlation") {
		t.Errorf("summary says nothing of the hints:\n%s", out.String())
	}
	// The simulator's lengths owe nothing to the hints: a correlation
	// near 0 must not read as a fault of the user's hints.
	if !strings.Contains(out.String(), "the simulator draws answer lengths without reading the hints") {
		t.Errorf("summary of simulated answers does not say the simulator ignores hints:\n%s", out.String())
	}
	page, err := os.ReadFile(sum.Report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "over 30 answers with a hint") {
		t.Error("report.html says nothing of the hints")
	}
	if !strings.Contains(string(page), "without reading the hints") {
		t.Error("report.html of simulated answers does not say the simulator ignores hints")
	}
}

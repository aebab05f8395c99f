package pipeline_test

import (
	"context"
	"testing"

	"github.com/aerie-dev/aerie/pipeline"
)

// aerie run with --window auto against its simulator: the workers size
// their windows from its metrics (at most MaxWindow) and the run is done.
func TestAutoWindowRun(t *testing.T) {
	cfg := config(t, "auto", promptsFile(t, 300))
	cfg.Worker.AutoWindow, cfg.Worker.MaxWindow = true, 24
	sum, err := pipeline.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done || sum.Completed != 300 {
		t.Fatalf("done %v with %d completed, want 300", sum.Done, sum.Completed)
	}
	if got := len(readOutput(t, sum.Completions)); got != 300 {
		t.Fatalf("%d completions written, want 300", got)
	}
}

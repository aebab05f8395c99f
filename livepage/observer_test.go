package livepage_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/livepage"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/worker"
)

// Fed by a real run's aggregator, the page holds the run's final numbers,
// every written answer in the length distribution, its workers and a
// history of its events.
func TestPageFedByAggregator(t *testing.T) {
	const run, prompts = "fed", 120
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := simulator.WritePrompts(f, prompts, 3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	page := livepage.New(run)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := pipeline.Run(ctx, pipeline.Config{
		Run: run, PromptsFile: path, DataDir: t.TempDir(),
		Sim:     simulator.Config{Speed: 2000, OutputMedian: 150, MaxNumSeqs: 64},
		Workers: 2, Worker: worker.Config{Window: 16, Grace: 100 * time.Millisecond},
		EventInterval: 50 * time.Millisecond, Observer: page,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := page.State()
	if s.Last == nil || s.Last.Phase != schema.PhaseDone || s.Last.Completed != sum.Completed || s.Last.Total != prompts {
		t.Fatalf("page's last event %+v; want done with %d of %d", s.Last, sum.Completed, prompts)
	}
	if s.Lengths.Count != int64(sum.Completed) {
		t.Errorf("length distribution counts %d answers, the run wrote %d", s.Lengths.Count, sum.Completed)
	}
	// A worker's first heartbeat may go out before the aggregator listens;
	// its last, as it stops, does not.
	if len(s.History) < 2 || len(s.Workers) == 0 || len(s.Workers) > 2 {
		t.Errorf("history of %d points and %d workers; want the run's events and its workers (2)", len(s.History), len(s.Workers))
	}
}

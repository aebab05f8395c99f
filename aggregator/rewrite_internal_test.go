package aggregator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// Replayed prompts whose answers arrive one by one while their failed
// lines are still in failed.jsonl leave it in a few batched rewrites, not
// one rewrite of the whole file per answer (quadratic in a large replay).
func TestFailedLinesLeaveInBatches(t *testing.T) {
	const n = 300
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: "rw", Total: n}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := func(i int) string { return fmt.Sprintf("p%04d", i) }
	for i := range n {
		data, _ := schema.EncodeDeadLetter(&schema.DeadLetter{Run: "rw", ID: id(i), Reason: schema.ReasonExhausted, FailedAt: time.Now().UTC()})
		if _, err := js.Publish(ctx, schema.DeadSubject("rw", schema.Unit{ID: id(i)}), data); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	a, err := New(Config{Run: "rw", DataDir: dir, Batch: 1, EventInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, js)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	brokertest.Eventually(t, 30*time.Second, func() bool { return a.Last().Failed == n }, "every dead letter written")
	for i := range n {
		data, _ := schema.EncodeResult(&schema.Result{Run: "rw", ID: id(i), Content: "answer", FinishReason: "stop"})
		if _, err := js.Publish(ctx, schema.ResultSubject("rw", schema.Unit{ID: id(i)}), data); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, 30*time.Second, func() bool { return a.Last().Completed == n }, "every answer written")
	a.mu.Lock()
	rewrites := a.failed.rewrites
	a.mu.Unlock()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// How many answers one fetch brings depends on how busy the machine
	// is (3 rewrites on an idle one, about 30 on a loaded one); one
	// rewrite per answer is what must not happen.
	if rewrites > n/4 {
		t.Errorf("failed.jsonl was rewritten %d times for %d answers, want batched rewrites (at most %d)", rewrites, n, n/4)
	}
	b, err := os.ReadFile(filepath.Join(dir, "rw", FailedFile))
	if err != nil || strings.TrimSpace(string(b)) != "" {
		t.Errorf("failed.jsonl after stopping = %q (%v), want empty", b, err)
	}
}

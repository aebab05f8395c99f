package aggregator_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// cancelOn is a log handler that calls cancel when a record whose message
// starts with prefix is logged: a way to end a context at a known point.
type cancelOn struct {
	prefix string
	cancel context.CancelFunc
}

func (h cancelOn) Enabled(context.Context, slog.Level) bool { return true }
func (h cancelOn) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h cancelOn) WithGroup(string) slog.Handler            { return h }
func (h cancelOn) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.cancel()
	}
	return nil
}

// A context that ends while the aggregator is still starting, after it
// holds the run's files and before it has looked up its consumers, is a
// stop asked for: Run returns nil, as it does once running. The context
// is cancelled by the warning that the manifest could not be written
// beside the output (a directory stands in its way), the one thing
// logged between the two.
func TestCancelWhileStartingReturnsNil(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 3}, nil)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, run, aggregator.ManifestFile, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := aggregator.New(aggregator.Config{
		Run: run, DataDir: dir, EventInterval: 50 * time.Millisecond,
		Logger: slog.New(cancelOn{prefix: "cannot write the run's manifest", cancel: cancel}),
	}, js)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run cancelled while starting: %v, want nil", err)
		}
		if ctx.Err() == nil {
			t.Error("Run returned before the context was cancelled: the test did not reach its point")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// A context already ended makes Run return nil at once.
func TestCancelBeforeRunReturnsNil(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 3}, nil)
	a, err := aggregator.New(aggregator.Config{Run: run, DataDir: t.TempDir(), Logger: quiet}, js)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Errorf("Run with an ended context: %v, want nil", err)
	}
}

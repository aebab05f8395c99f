package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
)

// The JetStream store fills in the middle of `aerie run` with two
// workers: they pause, keeping the answers they hold, and the run waits.
// Once room is freed the run finishes by itself with every prompt
// written once and none failed.
func TestStoreFullMidRun(t *testing.T) {
	const n = 600
	cfg := config(t, "full", promptsFile(t, n))
	cfg.Sim.Speed = 20
	cfg.NATSMaxStore = 64 << 20
	cfg.NATSListen = brokertest.FreeAddr(t)
	var triggered atomic.Bool
	filled := make(chan error, 1)
	cfg.OnEvent = func(s schema.Throughput) {
		if s.Completed >= n/10 && triggered.CompareAndSwap(false, true) {
			go func() { filled <- fillUntilPaused("nats://"+cfg.NATSListen, cfg.Run) }()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := pipeline.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !triggered.Load() {
		t.Fatalf("no event saw %d prompts completed: the store was never filled", n/10)
	}
	if err := <-filled; err != nil {
		t.Fatal(err)
	}
	if !sum.Done || sum.Completed != n || sum.Failed != 0 {
		t.Fatalf("after the store filled: %d completed, %d failed, done %v; want %d, 0, true", sum.Completed, sum.Failed, sum.Done, n)
	}
	if sum.StoreFull <= 0 {
		t.Errorf("the workers never waited for room (store full %v)", sum.StoreFull)
	}
	// Two workers may hand prompts to each other (a second delivery),
	// so deliveries are not counted here: the worker's own test checks
	// that waiting for room spends none.
	seen := map[string]int{}
	for _, l := range readOutput(t, sum.Completions) {
		seen[l.ID]++
	}
	if len(seen) != n {
		t.Errorf("%d prompts in completions.jsonl, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s written %d times", id, c)
		}
	}
	t.Logf("workers waited %v for room in all; %d prompts written once each", sum.StoreFull.Round(time.Millisecond), len(seen))
}

// fillUntilPaused fills the store of the server at url, waits for a
// worker of run to say in its heartbeat that the store is full, and
// frees the room again.
func fillUntilPaused(url, run string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	full := make(chan struct{}, 1)
	sub, err := nc.Subscribe(schema.HeartbeatFilter(run), func(m *nats.Msg) {
		var hb schema.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil && hb.Paused && strings.Contains(hb.PausedReason, "store full") {
			select {
			case full <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fill, err := brokertest.Fill(ctx, js)
	if err != nil {
		return err
	}
	select {
	case <-full:
	case <-ctx.Done():
		return errors.New("no worker said the store was full within a minute")
	}
	if err := fill.Purge(ctx); err != nil {
		return fmt.Errorf("free the store: %w", err)
	}
	return nil
}

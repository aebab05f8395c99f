package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// A JetStream store that fills mid-run pauses the worker, which keeps
// the answers it holds; once space is freed it stores them and goes on.
// Every prompt is answered once, none is dead-lettered, and no prompt
// spent a delivery waiting.
func TestStoreFullPausesAndResumes(t *testing.T) {
	const prompts = 20
	srv := brokertest.StartSmall(t, 48<<20)
	_, js := brokertest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := provision.WorkersConsumer(ctx, js, "test", provision.Options{}); err != nil {
		t.Fatal(err)
	}
	brokertest.Queue(t, js, schema.Manifest{Run: "test"}, brokertest.Prompts(prompts))

	// Another stream takes the rest of the store.
	fill := brokertest.FillStore(t, js)

	b := &bundle{srv: srv, js: js, run: "test"}
	w, _ := b.start(t, worker.Config{Window: 4}, simtest.Serve(t, simulator.Config{Model: "test-model", Speed: 100, ReasoningShare: -1}))
	brokertest.Eventually(t, time.Minute, func() bool { return w.Stats().StoreFull > 0 }, "the worker to find the store full")
	if s := w.Stats(); s.Completed != 0 || s.DeadLettered != 0 {
		t.Fatalf("with the store full: completed %d, dead-lettered %d", s.Completed, s.DeadLettered)
	}
	if err := fill.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	b.waitSettled(t, time.Minute)
	waitCounted(t, prompts, w)
	res := b.results(t)
	if len(res) != prompts {
		t.Errorf("%d results, want %d", len(res), prompts)
	}
	for id, r := range res {
		if r.Attempts != 1 {
			t.Errorf("%s stored on delivery %d, want the first", id, r.Attempts)
		}
	}
	if s := w.Stats(); s.DeadLettered != 0 || s.Paused != 0 {
		t.Errorf("dead-lettered %d, breaker open %s; want none", s.DeadLettered, s.Paused)
	}
}

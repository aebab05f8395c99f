package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// setupDurable is setup on a server that fsyncs every write before
// acknowledging it, as aerie's own does: the case group commit is for.
func setupDurable(t *testing.T, prompts int) *bundle {
	t.Helper()
	srv, err := broker.Start(broker.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	_, js := brokertest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	b := &bundle{srv: srv, js: js, run: "test"}
	if _, err := provision.WorkersConsumer(ctx, js, b.run, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	brokertest.Queue(t, js, schema.Manifest{Run: b.run}, brokertest.Prompts(prompts))
	return b
}

// Two workers storing the results of one run through their group commits
// at once store exactly one result per prompt.
func TestTwoWorkersStoreThroughBatches(t *testing.T) {
	const n = 400
	b := setupDurable(t, n)
	_, url := newFakeLLM(t, &fakeLLM{})
	wa, _ := b.start(t, worker.Config{Name: "a", Window: 100}, url)
	wb, _ := b.start(t, worker.Config{Name: "b", Window: 100}, url)
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, n, wa, wb)
	res := b.results(t) // fails on a second result for a prompt
	if len(res) != n {
		t.Fatalf("%d results, want %d", len(res), n)
	}
	by := map[string]int{}
	for _, r := range res {
		by[r.Worker]++
	}
	if sa, sb := wa.Stats(), wb.Stats(); sa.Completed+sb.Completed != n || int(sa.Completed) != by["a"] {
		t.Fatalf("completed a=%d b=%d, stored by %v; want %d in all, each worker's own", sa.Completed, sb.Completed, by, n)
	}
}

// Prompts whose answers finish together are stored together; when some
// of them already have a result stored (an earlier worker stored it and
// died before acknowledging), their batch is refused whole, and storing
// each on its own keeps the first answer for those and stores the others.
func TestBatchWithStoredResultKeepsFirstAnswer(t *testing.T) {
	const n, stored = 120, 12
	b := setupDurable(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := map[string]bool{}
	for i := range stored {
		id := fmt.Sprintf("p%04d", i*10)
		first[id] = true
		data, err := schema.EncodeResult(&schema.Result{Run: b.run, ID: id, Content: "the first answer", Worker: "earlier"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.js.Publish(ctx, schema.ResultSubject(b.run, schema.Unit{ID: id}), data,
			jetstream.WithMsgID(schema.MsgID(b.run, schema.Unit{ID: id}))); err != nil {
			t.Fatal(err)
		}
	}
	f, url := newFakeLLM(t, &fakeLLM{hold: make(chan struct{})})
	b.start(t, worker.Config{Name: "w", Window: n}, url)
	// Hold every answer until all are asked for, so they finish together.
	brokertest.Eventually(t, 20*time.Second, func() bool { in, _ := f.snapshot(); return in == n }, "%d requests at the backend", n)
	close(f.hold)
	b.waitSettled(t, 60*time.Second)
	res := b.results(t)
	if len(res) != n {
		t.Fatalf("%d results, want %d", len(res), n)
	}
	for id, r := range res {
		if want := first[id]; want != (r.Content == "the first answer") {
			t.Errorf("%s: %q by %s; first answer kept: %v", id, r.Content, r.Worker, want)
		}
	}
}

// A results stream that does not take atomic batches (made by an older
// aerie and not provisioned since, or on an older server) gets every
// result stored on its own, after at most one warning. A warning comes
// only when two results meet in one commit (a lone result goes as a plain
// publish, which such a stream takes), and whether they do depends on
// timing; batchstore's TestStreamWithoutAtomicPublishTurnsBatchingOff
// checks the warning itself.
func TestResultsStreamWithoutAtomicPublishStoresEachAlone(t *testing.T) {
	const n = 60
	b := setupDurable(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, schema.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	f, url := newFakeLLM(t, &fakeLLM{hold: make(chan struct{})})
	b.start(t, worker.Config{Name: "w", Window: n, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}, url)
	brokertest.Eventually(t, 20*time.Second, func() bool { in, _ := f.snapshot(); return in == n }, "%d requests at the backend", n)
	close(f.hold)
	b.waitSettled(t, 60*time.Second)
	if res := b.results(t); len(res) != n {
		t.Fatalf("%d results, want %d", len(res), n)
	}
	if c := strings.Count(logs.String(), "does not take atomic batches"); c > 1 {
		t.Fatalf("%d warnings that batching is off, want at most 1:\n%s", c, logs.String())
	}
}

package producer

import (
	"context"
	"testing"
	"time"

	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// On a server that fsyncs every write, prompts go in atomic batches; a
// second produce of the same file, every prompt already queued, has each
// batch refused whole and stores nothing, counting every prompt as
// already queued.
func TestBatchedProduceIsIdempotent(t *testing.T) {
	e := setup(t)
	srv, err := broker.Start(broker.Config{StoreDir: t.TempDir()}) // sync_interval always
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	_, js := brokertest.Connect(t, srv)
	const n = 1000
	cfg := e.config(e.file(t, "p.jsonl", promptLines(0, n)))
	rep, err := Run(ctxFor(t), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != n || rep.AlreadyQueued != 0 || rep.Failed != 0 {
		t.Fatalf("report %+v, want %d published", rep, n)
	}
	batched := 0
	for _, m := range fetchPrompts(t, js, cfg.Run, n) {
		if m.Headers().Get(jetstreamext.BatchIDHeader) != "" {
			batched++
		}
	}
	if batched == 0 {
		t.Fatal("no prompt was stored in a batch")
	}
	t.Logf("%d of %d prompts stored in batches", batched, n)

	rep, err = Run(ctxFor(t), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != 0 || rep.AlreadyQueued != n || rep.Failed != 0 {
		t.Fatalf("second produce: report %+v, want all %d already queued", rep, n)
	}
	if got := storedPrompts(t, js); got != n {
		t.Fatalf("stream holds %d prompts, want %d", got, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		t.Fatal(err)
	}
	if !st.CachedInfo().Config.AllowAtomicPublish {
		t.Fatal("prompts stream does not allow atomic publish")
	}
}

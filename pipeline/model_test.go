package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
)

// guard bounds a test that would otherwise hang on the bug it checks for;
// it is far longer than the test needs, and only a guard.
const guard = 2 * time.Minute

// modelServer is an OpenAI-compatible backend that answers /health and
// /v1/models in vLLM's shapes; models returns the served ids for the
// n-th listing (1-based).
func modelServer(t *testing.T, models func(n int64) []string) *httptest.Server {
	t.Helper()
	var listings atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(http.StatusOK)
		case "/v1/models":
			var data []string
			for _, id := range models(listings.Add(1)) {
				data = append(data, fmt.Sprintf(`{"id": %q, "object": "model", "created": 1764547200, "owned_by": "vllm", "max_model_len": 4096}`, id))
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"object": "list", "data": [%s]}`, strings.Join(data, ", "))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error": {"message": "no route %s", "type": "NotFoundError", "param": null, "code": 404}}`, r.URL.Path)
		}
	}))
	t.Cleanup(hs.Close)
	return hs
}

// A model the backend does not serve fails the run before anything is
// queued: the error names what is served and what to pass, and no
// manifest binds the run name to the wrong model.
func TestWrongModelFailsBeforeQueuing(t *testing.T) {
	hs := modelServer(t, func(int64) []string { return []string{"a"} })
	cfg := config(t, "wrong-model", promptsFile(t, 20))
	cfg.Backend, cfg.Model = hs.URL, "b"
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	sum, err := pipeline.Run(ctx, cfg)
	if ctx.Err() != nil {
		t.Fatalf("the run waited until the test's guard of %v ended it", guard)
	}
	if err == nil {
		t.Fatalf("no error; summary %+v", sum)
	}
	for _, want := range []string{`does not serve model "b"`, `serves ["a"]`, "pass --model a"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	srv, err := broker.Start(broker.Config{StoreDir: filepath.Join(cfg.DataDir, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	_, js := brokertest.Connect(t, srv)
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return // nothing was provisioned, let alone a manifest
	}
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, cfg.Run); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a manifest was written for the run: %v, %v", e, err)
	}
}

// Workers that cannot start (here: the backend has been restarted with
// another model since the run began) end the run with their error
// instead of leaving it waiting for answers that cannot come.
func TestAllWorkersFailing(t *testing.T) {
	hs := modelServer(t, func(n int64) []string {
		if n == 1 {
			return []string{"a"} // the run's own check
		}
		return []string{"other"}
	})
	cfg := config(t, "no-workers", promptsFile(t, 20))
	cfg.Backend, cfg.Model = hs.URL, "a"
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	_, err := pipeline.Run(ctx, cfg)
	if ctx.Err() != nil {
		t.Fatalf("the run waited until the test's guard of %v ended it", guard)
	}
	if err == nil {
		t.Fatal("no error with every worker failed")
	}
	for _, want := range []string{"all 2 workers stopped", `not the run's model "a"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

package requeue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/requeue"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// A prompt that failed for good, replayed once the cause is fixed, ends
// exactly once in completions.jsonl and leaves failed.jsonl.
func TestReplayedPromptLeavesFailed(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	const run = "replay-e2e"
	brokertest.Queue(t, js, schema.Manifest{Run: run, Model: "m"}, brokertest.Prompts(5))

	var reject atomic.Bool
	reject.Store(true)
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			return
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m"}]}`)
			return
		}
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if reject.Load() && strings.HasSuffix(req.Messages[0].Content, "p0001") {
			w.WriteHeader(400)
			fmt.Fprint(w, `{"error":{"message":"context length exceeded","type":"BadRequestError","code":400}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"reasoning":"r","content":"a"},"finish_reason":"stop"}]}`+"\n\n")
		fmt.Fprint(w, `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer llm.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	agg, err := aggregator.New(aggregator.Config{Run: run, DataDir: dir, EventInterval: 50 * time.Millisecond, Logger: quiet}, js)
	if err != nil {
		t.Fatal(err)
	}
	go agg.Run(ctx) //nolint:errcheck
	client, _ := openai.New(openai.Config{BaseURL: llm.URL})
	w, err := worker.New(worker.Config{Run: run, Window: 5, PullWait: 200 * time.Millisecond, Logger: quiet}, js, client)
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx) //nolint:errcheck

	brokertest.Eventually(t, 20*time.Second, func() bool {
		l := agg.Last()
		return l.Completed == 4 && l.Failed == 1
	}, "4 completed and p0001 failed")

	// Replayed while the cause is still there, it fails again at once, well
	// inside JetStream's two-minute de-duplication window: the new
	// failure must be recorded (a dead letter to replay from), not lost.
	rep, err := requeue.Replay(ctx, js, requeue.ReplayConfig{Run: run, Reasons: []string{schema.ReasonPermanent}})
	if err != nil || rep.NumReplayed() != 1 {
		t.Fatalf("first replay: %v, %+v", err, rep)
	}
	brokertest.Eventually(t, 20*time.Second, func() bool {
		dry, err := requeue.Replay(ctx, js, requeue.ReplayConfig{Run: run, DryRun: true})
		return err == nil && dry.NumReplayed() == 1 && agg.Last().Failed == 1
	}, "the second failure recorded as a dead letter")

	reject.Store(false)
	rep, err = requeue.Replay(ctx, js, requeue.ReplayConfig{Run: run, Reasons: []string{schema.ReasonPermanent}})
	if err != nil || rep.NumReplayed() != 1 {
		t.Fatalf("replay: %v, %+v", err, rep)
	}
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l := agg.Last()
		return l.Completed == 5 && l.Failed == 0 && l.Phase == schema.PhaseDone
	}, "5 completed, none failed")

	completions, _ := os.ReadFile(filepath.Join(dir, run, aggregator.CompletionsFile))
	if n := strings.Count(string(completions), `"id":"p0001"`); n != 1 {
		t.Errorf("p0001 appears %d times in completions.jsonl", n)
	}
	if failed, _ := os.ReadFile(filepath.Join(dir, run, aggregator.FailedFile)); len(failed) != 0 {
		t.Errorf("failed.jsonl still holds: %s", failed)
	}
}

package pipeline_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/pipeline"
)

// The workers and the aggregator start once the run's manifest is
// stored, not once every prompt is queued: a prompt is answered before
// the producer has returned, and the run still ends with every prompt
// exactly once.
func TestWorkStartsWhileQueuing(t *testing.T) {
	const n = 300
	llm := instantLLM()
	defer llm.Close()
	answered := make(chan struct{})
	var once sync.Once
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			once.Do(func() { close(answered) })
		}
		llm.Config.Handler.ServeHTTP(w, r)
	}))
	defer backend.Close()
	// The producer's closing line ("produce finished", logged before it
	// returns) is held until a prompt is answered, or 30 s have passed:
	// what happens meanwhile happens while prompts are still queued.
	var mu sync.Mutex
	var held bool // the closing line waited for an answer and got one
	h := onLog{out: quiet.Handler(), msg: "produce finished", once: &sync.Once{}, f: func() {
		select {
		case <-answered:
			mu.Lock()
			held = true
			mu.Unlock()
		case <-time.After(30 * time.Second):
		}
	}}
	cfg := config(t, "overlap", promptsFile(t, n))
	cfg.Backend, cfg.Model, cfg.Logger = backend.URL, "m", slog.New(h)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := pipeline.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !held {
		t.Error("no prompt was answered until the producer had returned")
	}
	count := map[string]int{}
	for _, l := range readOutput(t, filepath.Join(cfg.DataDir, "overlap", "completions.jsonl")) {
		count[l.ID]++
	}
	for id, c := range count {
		if c != 1 {
			t.Errorf("%s written %d times", id, c)
		}
	}
	if !sum.Done || len(count) != n || sum.Completed != n {
		t.Fatalf("done=%v, %d distinct ids written, %d completed; want %d", sum.Done, len(count), sum.Completed, n)
	}
}

// onLog is a log handler that calls f once, on the first line with the
// given message, before passing it to out.
type onLog struct {
	out  slog.Handler
	msg  string
	once *sync.Once
	f    func()
}

func (h onLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(h.f)
	}
	if !h.out.Enabled(ctx, r.Level) {
		return nil
	}
	return h.out.Handle(ctx, r)
}

func (h onLog) Enabled(context.Context, slog.Level) bool { return true }

func (h onLog) WithAttrs(as []slog.Attr) slog.Handler {
	h.out = h.out.WithAttrs(as)
	return h
}

func (h onLog) WithGroup(name string) slog.Handler {
	h.out = h.out.WithGroup(name)
	return h
}

// Queuing that fails once the workers and the aggregator are running
// (here the prompts file changes between the producer's two passes)
// still ends the run with the producer's error, rather than leaving it
// waiting for prompts that will never be queued.
func TestProduceFailureStopsTheRun(t *testing.T) {
	llm := instantLLM()
	defer llm.Close()
	prompts := promptsFile(t, 50)
	f, err := os.OpenFile(prompts, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("not json\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cfg := config(t, "changed", prompts)
	cfg.Backend, cfg.Model, cfg.SkipInvalid = llm.URL, "m", true
	// The invalid line is logged after the validation pass and before
	// the manifest is stored; the file then changes under the producer.
	cfg.Logger = slog.New(onLog{out: quiet.Handler(), msg: "produce: skipping invalid line", once: &sync.Once{}, f: func() {
		f, err := os.OpenFile(prompts, os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString(`{"id":"late","messages":[{"role":"user","content":"hi"}]}` + "\n")
			f.Close()
		}
		if err != nil {
			t.Error(err)
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = pipeline.Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "changed while it was being produced") {
		t.Fatalf("run ended with %v, want the producer's error about the changed file", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the run ended only with the test's deadline")
	}
}

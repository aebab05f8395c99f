package aggregator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

var quiet = slog.New(slog.DiscardHandler)

const run = "agg"

func publishResults(t testing.TB, js jetstream.JetStream, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		r := &schema.Result{
			Run: run, ID: id, Messages: []schema.Message{{Role: "user", Content: "q " + id}},
			Model: "m", Reasoning: "r " + id, Content: "a " + id, FinishReason: "stop",
			PromptTokens: 3, CompletionTokens: 100, Worker: "w", Attempts: 1,
		}
		data, err := schema.EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(schema.ResultSubject(run, schema.Unit{ID: id}))
		m.Data = data
		m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindResult))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// writtenOnce fails the test for each id of want that got does not hold
// exactly once.
func writtenOnce(t *testing.T, got, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("%s written %d times", id, seen[id])
		}
	}
}

func ids(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("p%04d", i))
	}
	return out
}

// readLines returns the ids of a JSONL file's lines, failing on any line
// that is not a JSON object with an id.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			ID      string `json:"id"`
			Content string `json:"content"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.ID == "" {
			t.Fatalf("%s: bad line %q: %v", path, sc.Text(), err)
		}
		out = append(out, l.ID)
	}
	return out
}

func start(t testing.TB, js jetstream.JetStream, cfg aggregator.Config) (*aggregator.Aggregator, func() error) {
	t.Helper()
	cfg.Run = run
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.EventInterval == 0 {
		cfg.EventInterval = 50 * time.Millisecond
	}
	a, err := aggregator.New(cfg, js)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return a, stop
}

// An aggregator stopped mid-run, with a torn last line and lines written
// but never acknowledged (a crash between fsync and ack), leaves every id
// exactly once when it comes back.
func TestExactlyOnceAcrossRestart(t *testing.T) {
	const n = 600
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
	dir := t.TempDir()
	out := filepath.Join(dir, run, aggregator.CompletionsFile)

	// The previous aggregator wrote p0000..p0019 and died before acking,
	// in the middle of writing p0020.
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	var pre strings.Builder
	for _, id := range ids(0, 20) {
		fmt.Fprintf(&pre, `{"id":%q,"content":"earlier","usage":{"completion_tokens":10}}`+"\n", id)
	}
	pre.WriteString(`{"id":"p0020","content":"torn`)
	if err := os.WriteFile(out, []byte(pre.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	publishResults(t, js, ids(0, n/2))
	_, stop := start(t, js, aggregator.Config{DataDir: dir, Batch: 16})
	brokertest.Eventually(t, 30*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "\n") >= n/4
	}, "first aggregator to write a quarter")
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	publishResults(t, js, ids(n/2, n))
	a, stop2 := start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("second aggregator did not finish the run")
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}

	got := readLines(t, out)
	writtenOnce(t, got, ids(0, n))
	if len(got) != n {
		t.Errorf("%d lines, want %d", len(got), n)
	}
	if last := a.Last(); last.Phase != schema.PhaseDone || last.Completed != n {
		t.Errorf("last event = %+v, want done with %d completed", last, n)
	}
}

// Dead letters go to failed.jsonl, results to completions.jsonl; events
// are published as JSON, appended to events.jsonl, and the run ends done.
// The run's manifest is copied to manifest.json.
func TestFailedAndEvents(t *testing.T) {
	_, nc, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 10}, nil)
	events := make(chan schema.Throughput, 1000)
	sub, err := nc.Subscribe(schema.ThroughputSubject(run), func(m *nats.Msg) {
		var e schema.Throughput
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Errorf("event is not JSON: %v", err)
		}
		events <- e
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	publishResults(t, js, ids(0, 6))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids(6, 10) {
		d := &schema.DeadLetter{Run: run, ID: id, Reason: schema.ReasonPermanent, Status: 400, Error: "too long", Attempts: 1}
		data, err := schema.EncodeDeadLetter(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, schema.DeadSubject(run, schema.Unit{ID: id}), data); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	a, stop := start(t, js, aggregator.Config{DataDir: dir})
	var l schema.Throughput
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l = a.Last()
		return l.Completed == 6 && l.Failed == 4 && l.Phase == schema.PhaseDone
	}, "6 completed, 4 failed, done: %+v", &l)
	stop()

	if got := readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)); len(got) != 6 {
		t.Errorf("completions: %v", got)
	}
	failed := readLines(t, filepath.Join(dir, run, aggregator.FailedFile))
	if len(failed) != 4 {
		t.Errorf("failed.jsonl holds %v, want p0006..p0009", failed)
	}
	if len(events) == 0 {
		t.Fatal("no throughput event published")
	}
	b, err := os.ReadFile(filepath.Join(dir, run, aggregator.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var last schema.Throughput
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Completed != 6 || last.Failed != 4 || last.Total != 10 || last.Phase != schema.PhaseDone {
		t.Errorf("last event in events.jsonl = %+v", last)
	}
	b, err = os.ReadFile(filepath.Join(dir, run, aggregator.ManifestFile))
	if err != nil {
		t.Fatalf("no manifest beside the outputs: %v", err)
	}
	if m, err := schema.DecodeManifest(b); err != nil || m.Run != run || m.Total != 10 {
		t.Errorf("manifest.json = %s (%v), want the run's manifest", b, err)
	}
}

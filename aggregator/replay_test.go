package aggregator_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/requeue"
	"github.com/aerie-dev/aerie/schema"
)

func publishDeadLetter(t *testing.T, js jetstream.JetStream, id, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &schema.DeadLetter{Run: run, ID: id, Messages: []schema.Message{{Role: "user", Content: "question " + id}},
		Reason: schema.ReasonExhausted, Error: why, Attempts: 5, FailedAt: time.Now().UTC()}
	data, err := schema.EncodeDeadLetter(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, schema.DeadSubject(run, schema.Unit{ID: id}), data); err != nil {
		t.Fatal(err)
	}
}

// failedLines returns failed.jsonl's lines by id.
func failedLines(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, run, aggregator.FailedFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		id := line[strings.Index(line, `"id":"`)+6:]
		out[id[:strings.Index(id, `"`)]] = line
	}
	return out
}

// After `aerie replay`, an aggregator run as deploy/ runs it
// (--exit-when-done) is not done until the replayed prompts have their new
// outcome: the one that completes is in completions.jsonl and no longer in
// failed.jsonl; the one that fails again has its latest failure there.
func TestReplayThenExitWhenDone(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run}, brokertest.Prompts(3))
	publishResults(t, js, []string{"p0000"})
	publishDeadLetter(t, js, "p0001", "first failure")
	publishDeadLetter(t, js, "p0002", "first failure")
	dir := t.TempDir()

	// The run ends with one answer and two failures.
	a, stop := start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	waitDone(t, a)
	stop()
	if f := failedLines(t, dir); len(f) != 2 {
		t.Fatalf("failed.jsonl holds %d lines, want 2", len(f))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := requeue.Replay(ctx, js, requeue.ReplayConfig{Run: run})
	if err != nil || rep.NumReplayed() != 2 {
		t.Fatalf("replay: %v, %+v", err, rep)
	}

	// The aggregator started again waits for the replayed prompts.
	a, stop = start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l := a.Last()
		return l.Completed == 1 && l.Failed == 0 && l.Phase != schema.PhaseDone
	}, "the replayed prompts to count as pending, not failed: %+v", a.Last())
	select {
	case <-a.Done():
		t.Fatal("the aggregator declared the run done while two replayed prompts had no outcome")
	default:
	}
	if f := failedLines(t, dir); len(f) != 0 {
		t.Errorf("failed.jsonl still holds %v while they are queued again", f)
	}

	// One completes, one fails again.
	publishResults(t, js, []string{"p0001"})
	publishDeadLetter(t, js, "p0002", "second failure")
	waitDone(t, a)
	stop()
	if got := readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)); !slices.Equal(sorted(got), []string{"p0000", "p0001"}) {
		t.Errorf("completions.jsonl holds %v, want p0000 and p0001", got)
	}
	f := failedLines(t, dir)
	if len(f) != 1 || !strings.Contains(f["p0002"], "second failure") {
		t.Errorf("failed.jsonl = %v, want only p0002 with its second failure", f)
	}
}

// A prompt whose new failure arrives while its old line is still in
// failed.jsonl (the aggregator was not running during the replay) gets
// its line replaced, not a second one.
func TestNewerFailureReplacesTheLine(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run}, brokertest.Prompts(1))
	publishDeadLetter(t, js, "p0000", "first failure")
	dir := t.TempDir()
	a, stop := start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	waitDone(t, a)
	stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := requeue.Replay(ctx, js, requeue.ReplayConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	publishDeadLetter(t, js, "p0000", "second failure")
	a, stop = start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	waitDone(t, a)
	stop()
	f := failedLines(t, dir)
	if len(f) != 1 || !strings.Contains(f["p0000"], "second failure") {
		t.Errorf("failed.jsonl = %v, want one line with the second failure", f)
	}
}

// A crash between appending a replayed prompt's completion and removing
// its failed line leaves the prompt in both files. The completion wins
// when the aggregator starts again, and the prompt counts once: the run
// is not done while another prompt has no outcome.
func TestPromptInBothFilesCountsOnce(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run}, brokertest.Prompts(3))
	publishDeadLetter(t, js, "p0001", "failed")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, run), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, run, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(aggregator.CompletionsFile, `{"id":"p0000","content":"answer","usage":{"completion_tokens":10}}`+"\n")
	write(aggregator.FailedFile, `{"id":"p0000","reason":"retries-exhausted","failed_at":"2026-01-01T00:00:00Z"}`+"\n"+
		`{"id":"p0001","reason":"retries-exhausted","failed_at":"2026-01-01T00:00:00Z"}`+"\n")

	a, stop := start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l := a.Last()
		return l.Completed == 1 && l.Failed == 1 && l.Phase != ""
	}, "p0000 to count once, as completed: %+v", a.Last())
	select {
	case <-a.Done():
		t.Fatal("the run was declared done with p0002 missing")
	default:
	}
	publishResults(t, js, []string{"p0002"})
	waitDone(t, a)
	stop()
	if f := failedLines(t, dir); len(f) != 1 || f["p0001"] == "" {
		t.Errorf("failed.jsonl = %v, want only p0001", f)
	}
}

func waitDone(t *testing.T, a *aggregator.Aggregator) {
	t.Helper()
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the aggregator did not finish the run: %+v", a.Last())
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

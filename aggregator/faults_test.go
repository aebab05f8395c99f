package aggregator_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// A prompt whose last allowed delivery dies with its worker (no ack, no
// nak, no dead letter) is dead-lettered from JetStream's max-deliveries
// advisory, so it still ends in failed.jsonl.
func TestMaxDeliveriesBecomesDeadLetter(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := provision.WorkersConsumer(ctx, js, run, provision.Options{MaxDeliver: 1, AckWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	brokertest.Queue(t, js, schema.Manifest{Run: run}, brokertest.Prompts(3))
	dir := t.TempDir()
	a, _ := start(t, js, aggregator.Config{DataDir: dir})

	// A "worker" takes every prompt and dies holding them.
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for range batch.Messages() {
		got++
	}
	if got != 3 {
		t.Fatalf("fetched %d prompts", got)
	}
	brokertest.Eventually(t, 20*time.Second, func() bool { return a.Last().Failed == 3 && a.Last().Phase == schema.PhaseDone }, "3 failed prompts")
	for _, id := range readLines(t, filepath.Join(dir, run, aggregator.FailedFile)) {
		if !strings.HasPrefix(id, "p000") {
			t.Errorf("failed line for %q", id)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, run, aggregator.FailedFile))
	if !strings.Contains(string(b), `"reason":"retries-exhausted"`) || !strings.Contains(string(b), "max_deliver") {
		t.Errorf("failed.jsonl does not say why: %s", b)
	}
}

// A replayed prompt that completes leaves failed.jsonl and appears once in
// completions.jsonl; a result that cannot be decoded becomes a poison dead
// letter carrying its prompt, so that replay can send the prompt again,
// and reaches failed.jsonl from there.
func TestRecoveredAndPoison(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run}, brokertest.Prompts(3))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &schema.DeadLetter{Run: run, ID: "p0000", Reason: schema.ReasonExhausted, Attempts: 5}
	data, _ := schema.EncodeDeadLetter(d)
	if _, err := js.Publish(ctx, schema.DeadSubject(run, schema.Unit{ID: "p0000"}), data); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, stop := start(t, js, aggregator.Config{DataDir: dir})
	brokertest.Eventually(t, 10*time.Second, func() bool { return a.Last().Failed == 1 }, "the dead letter written")

	publishResults(t, js, []string{"p0000", "p0001"}) // p0000 replayed and answered
	garbage := nats.NewMsg(schema.ResultSubject(run, schema.Unit{ID: "p0002"}))
	garbage.Data = []byte("not msgpack")
	garbage.Header.Set(schema.HeaderPromptID, "p0002")
	garbage.Header.Set(schema.HeaderWorker, "w9")
	if _, err := js.PublishMsg(ctx, garbage); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool {
		l := a.Last()
		return l.Completed == 2 && l.Failed == 1 && l.Phase == schema.PhaseDone
	}, "2 completed, 1 failed (the poison)")
	stop()
	if got := readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)); len(got) != 2 {
		t.Errorf("completions: %v", got)
	}
	failed := readLines(t, filepath.Join(dir, run, aggregator.FailedFile))
	if len(failed) != 1 || failed[0] != "p0002" {
		t.Errorf("failed.jsonl holds %v, want only the poison p0002", failed)
	}
	dead, err := js.Stream(ctx, schema.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := dead.GetLastMsgForSubject(ctx, schema.DeadSubject(run, schema.Unit{ID: "p0002"}))
	if err != nil {
		t.Fatalf("no dead letter for the unreadable result: %v", err)
	}
	p, err := schema.DecodeDeadLetter(raw.Data)
	if err != nil || p.Reason != schema.ReasonPoison || len(p.Messages) != 1 || p.Messages[0].Content != "question p0002" || p.Worker != "w9" {
		t.Errorf("poison dead letter %+v (%v): want the prompt's messages and the worker", p, err)
	}
}

// When the data directory is full the aggregator stops acknowledging, says
// so in its events, and resumes when space is back: nothing lost, nothing
// written twice. Needs root to mount a small tmpfs; skipped otherwise.
func TestDiskFullPausesAndResumes(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s): needs root", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })

	const n = 400
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
	if err := os.MkdirAll(filepath.Join(dir, run), 0o755); err != nil {
		t.Fatal(err)
	}
	// Fill the disk, leaving a little room.
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 2<<20-64<<10), 0o644); err != nil && !strings.Contains(err.Error(), "no space") {
		t.Fatal(err)
	}
	a, stop := start(t, js, aggregator.Config{DataDir: dir, Batch: 32})
	publishResults(t, js, ids(0, n))
	brokertest.Eventually(t, 20*time.Second, func() bool { return a.Last().WriteError != "" }, "the event to report the write error")
	stuck := a.Last().Completed
	if stuck >= n {
		t.Fatalf("wrote all %d results on a full disk", stuck)
	}
	t.Logf("disk full after %d results: %s", stuck, a.Last().WriteError)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 30*time.Second, func() bool {
		l := a.Last()
		return l.Completed == n && l.WriteError == ""
	}, "every result written once space is back")
	stop()
	got := readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile))
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	if len(got) != n || len(seen) != n {
		t.Fatalf("%d lines, %d distinct, want %d", len(got), len(seen), n)
	}
}

// Stopping the aggregator mid-run leaves nothing pending on its consumer:
// what it fetched is written and acknowledged before it returns.
func TestStopLeavesNothingPending(t *testing.T) {
	const n = 2000
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
	publishResults(t, js, ids(0, n))
	dir := t.TempDir()
	a, stop := start(t, js, aggregator.Config{DataDir: dir, Batch: 64})
	brokertest.Eventually(t, 20*time.Second, func() bool { return a.Last().Completed > 0 }, "some results written")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, schema.ResultsStream, schema.ResultsConsumer(run))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	written := len(readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)))
	if info.NumAckPending != 0 {
		t.Errorf("%d results left pending after stop", info.NumAckPending)
	}
	if int(info.AckFloor.Stream) != written {
		t.Errorf("acknowledged up to %d, wrote %d lines", info.AckFloor.Stream, written)
	}
	t.Logf("stopped after writing %d of %d", written, n)
}

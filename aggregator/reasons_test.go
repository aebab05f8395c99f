package aggregator_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

func publishDeadLetterFor(t *testing.T, js jetstream.JetStream, id, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &schema.DeadLetter{Run: run, ID: id, Messages: []schema.Message{{Role: "user", Content: "question " + id}},
		Reason: reason, Error: "failed as " + reason, Attempts: 1, FailedAt: time.Now().UTC()}
	data, err := schema.EncodeDeadLetter(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, schema.DeadSubject(run, schema.Unit{ID: id}), data); err != nil {
		t.Fatal(err)
	}
}

// Throughput events count failures by reason, the count is read back
// from failed.jsonl by an aggregator started again, and a failed unit
// that completes after all leaves it.
func TestFailedByReasonSurvivesARestart(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run}, brokertest.Prompts(5))
	publishResults(t, js, []string{"p0000"})
	publishDeadLetterFor(t, js, "p0001", schema.ReasonPermanent)
	publishDeadLetterFor(t, js, "p0002", schema.ReasonPermanent)
	publishDeadLetterFor(t, js, "p0003", schema.ReasonExhausted)
	publishDeadLetterFor(t, js, "p0004", schema.ReasonTruncated)
	dir := t.TempDir()

	a, stop := start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	waitDone(t, a)
	stop()
	want := map[string]int{schema.ReasonPermanent: 2, schema.ReasonExhausted: 1, schema.ReasonTruncated: 1}
	if got := a.Last().FailedByReason; !maps.Equal(got, want) {
		t.Fatalf("failed by reason %v, want %v", got, want)
	}

	// Started again, with nothing new to read: the count comes from the file.
	a, stop = start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	waitDone(t, a)
	stop()
	if got := a.Last().FailedByReason; !maps.Equal(got, want) {
		t.Fatalf("after a restart, failed by reason %v, want %v", got, want)
	}

	// One of the permanent failures completes after all (a result stored
	// before its dead letter was read, say): it no longer counts.
	publishResults(t, js, []string{"p0001"})
	a, stop = start(t, js, aggregator.Config{DataDir: dir})
	want[schema.ReasonPermanent] = 1
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l := a.Last()
		return l.Completed == 2 && maps.Equal(l.FailedByReason, want)
	}, "failed by reason %v after p0001 completed, want %v", a.Last().FailedByReason, want)
	stop()
}

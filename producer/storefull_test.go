package producer

import (
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
)

// A produce into a full JetStream store waits for room, saying so and
// what to do, without spending the prompts' attempts, and finishes once
// space is freed: every prompt queued, none failed.
func TestProduceWaitsForRoom(t *testing.T) {
	t.Parallel()
	_, js := brokertest.Connect(t, brokertest.StartSmall(t, 48<<20))
	ctx := ctxFor(t)
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	fill := brokertest.FillStore(t, js)

	e := &testEnv{js: js, logs: &logtest.Buffer{}, dir: t.TempDir()}
	const n = 200
	cfg := e.config(e.file(t, "p.jsonl", promptLines(0, n)))
	cfg.Retries = 2 // a full store must not spend them
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Run(ctx, js, cfg)
		done <- result{rep, err}
	}()
	brokertest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(e.logs.String(), "the JetStream store is full")
	}, "the produce to say the store is full")
	if err := fill.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("produce: %v", r.err)
	}
	if r.rep.Published != n || r.rep.Failed != 0 {
		t.Errorf("report %+v, want %d published and none failed", r.rep, n)
	}
	if !strings.Contains(e.logs.String(), "the JetStream store has room again") {
		t.Errorf("the produce did not say it went on:\n%s", e.logs.String())
	}
}

// Prompts refused for want of room are tried again until they are
// stored, however many times, without spending their attempts.
func TestFullStoreSpendsNoAttempts(t *testing.T) {
	e := setup(t)
	const n = 20
	cfg := e.config(e.file(t, "p.jsonl", promptLines(0, n)))
	cfg.alone = true // the faults are injected into single publishes
	cfg.Retries = 2
	js := newFaultyJS(e.js, func(subject string, attempt, _ int) fault {
		if attempt <= 4 {
			return noRoomAsync
		}
		return noFault
	})
	rep, err := Run(ctxFor(t), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != n || rep.Failed != 0 {
		t.Fatalf("report %+v, want all %d published", rep, n)
	}
	if !strings.Contains(e.logs.String(), "the JetStream store is full: queuing waits for room") ||
		!strings.Contains(e.logs.String(), "the JetStream store has room again") {
		t.Errorf("the produce did not say it waited for room, and went on:\n%s", e.logs.String())
	}
}

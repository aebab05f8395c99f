package worker_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/worker"
)

// Two workers of window 4 on a consumer that lets 4 prompts out at once:
// the first holds all 4 at its backend, the second gets none while 16
// wait. The second says the consumer is full (log, Stats, heartbeats)
// and what MaxAckPending the two windows need (2 x 8), then, once the
// prompts are answered, that it has room again; the first, without a
// free slot, says nothing.
func TestFullConsumerIsReported(t *testing.T) {
	const n = 20
	b := setup(t, n, provision.Options{MaxAckPending: 4})
	f, url := newFakeLLM(t, &fakeLLM{hold: make(chan struct{})})
	var logsA, logsB logtest.Buffer
	logger := func(l *logtest.Buffer) *slog.Logger {
		return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	a, _ := b.start(t, worker.Config{Name: "a", Window: 4, Heartbeat: 20 * time.Millisecond, Logger: logger(&logsA)}, url)
	brokertest.Eventually(t, 20*time.Second, func() bool { in, _ := f.snapshot(); return in == 4 }, "worker a's 4 requests at the backend")
	w, _ := b.start(t, worker.Config{Name: "b", Window: 4, Heartbeat: 20 * time.Millisecond, Logger: logger(&logsB)}, url)

	heartbeats := b.heartbeats(t)
	brokertest.Eventually(t, 20*time.Second, func() bool { return w.Stats().ConsumerFull }, "worker b finds the consumer full")
	brokertest.Eventually(t, 10*time.Second, func() bool { hb := heartbeats.of("b"); return hb != nil && hb.ConsumerFull }, "worker b's heartbeats to say the consumer is full")
	if in, _ := f.snapshot(); in != 4 {
		t.Fatalf("%d requests at the backend, want 4: MaxAckPending lets no more out", in)
	}
	// The warning is written once the state is set, a moment after it.
	brokertest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(logsB.String(), "consumer is full") }, "worker b's warning of a full consumer")
	warned := logsB.String()
	for _, want := range []string{"consumer is full", "max_ack_pending=4", "their_windows=8", "--max-pending 16"} {
		if !strings.Contains(warned, want) {
			t.Errorf("worker b's warning lacks %q:\n%s", want, warned)
		}
	}
	if a.Stats().ConsumerFull || strings.Contains(logsA.String(), "consumer is full") {
		t.Errorf("worker a, without a free slot, reported a full consumer:\n%s", logsA.String())
	}

	close(f.hold)
	b.waitSettled(t, 60*time.Second)
	brokertest.Eventually(t, 20*time.Second, func() bool { return !w.Stats().ConsumerFull }, "worker b sees room again")
	brokertest.Eventually(t, 10*time.Second, func() bool { hb := heartbeats.of("b"); return hb != nil && !hb.ConsumerFull }, "worker b's heartbeats to say there is room")
	logs := logsB.String()
	if c := strings.Count(logs, "consumer is full"); c != 1 {
		t.Errorf("%d warnings of a full consumer, want 1:\n%s", c, logs)
	}
	if !strings.Contains(logs, "has room again") {
		t.Errorf("no word that the consumer has room again:\n%s", logs)
	}
	if got := b.resultCount(t); got != n {
		t.Errorf("%d results, want %d", got, n)
	}
}

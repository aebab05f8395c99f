package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// lackBeats counts the heartbeats of the run that say the worker lacks
// want, written by version by.
func lackBeats(t *testing.T, b *bundle, want []string, by string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := b.js.Conn().Subscribe(schema.HeartbeatFilter(b.run), func(m *nats.Msg) {
		var hb schema.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil && slices.Equal(hb.Lacks, want) && hb.LacksWrittenBy == by &&
			hb.Paused && hb.Version == schema.BuildVersion() && len(hb.Features) > 0 {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &n
}

// A worker of one run whose manifest needs a feature it lacks takes
// none of its prompts, and says which feature and which version has it
// in its log and in a heartbeat every period.
func TestWorkerLeavesARunItLacksAFeatureOf(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "future", Needs: []string{"warp-drive"}, WrittenBy: "v9.9.9"}, 10, provision.Options{})
	beats := lackBeats(t, b, []string{"warp-drive"}, "v9.9.9")
	f, url := newFakeLLM(t, &fakeLLM{})
	var logs logtest.Buffer
	b.start(t, worker.Config{Window: 4, Heartbeat: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, url)
	brokertest.Eventually(t, 20*time.Second, func() bool { return beats.Load() >= 5 }, "five heartbeats saying the worker lacks warp-drive")
	if info := b.consumer(t); info.Delivered.Consumer != 0 {
		t.Errorf("%d deliveries of a run the worker cannot serve", info.Delivered.Consumer)
	}
	if n := f.total(); n != 0 {
		t.Errorf("%d requests for a run the worker cannot serve", n)
	}
	for _, want := range []string{"warp-drive", "v9.9.9", "leaving the run alone"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, logs.String())
		}
	}
}

// A message that needs a feature the worker lacks, in a run it serves,
// is handed back uncounted, and the worker leaves the run: it pulls
// nothing more of it, and says why.
func TestWorkerHandsBackAMessageItLacksAFeatureOf(t *testing.T) {
	b := setup(t, 0, provision.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := nats.NewMsg(schema.PromptSubject(b.run, schema.Unit{ID: "needy"}))
	m.Data, _ = schema.EncodePrompt(&schema.Prompt{Run: b.run, ID: "needy", Messages: []schema.Message{{Role: "user", Content: "hi"}}})
	m.Header.Set(schema.HeaderPromptID, "needy")
	m.Header.Set(schema.HeaderNeeds, "warp-drive")
	m.Header.Set(schema.HeaderWrittenBy, "v9.9.9")
	if _, err := b.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	beats := lackBeats(t, b, []string{"warp-drive"}, "v9.9.9")
	f, url := newFakeLLM(t, &fakeLLM{})
	w, _ := b.start(t, worker.Config{Window: 4, Heartbeat: 20 * time.Millisecond}, url)
	brokertest.Eventually(t, 20*time.Second, func() bool { return beats.Load() >= 3 }, "heartbeats saying the worker lacks warp-drive")

	brokertest.Queue(t, b.js, schema.Manifest{Run: b.run}, brokertest.Prompts(5))
	brokertest.Eventually(t, 20*time.Second, func() bool { return beats.Load() >= 10 }, "more heartbeats after more prompts came")
	if n := f.total(); n != 0 {
		t.Errorf("%d requests after the worker left the run", n)
	}
	// Handed back, with any new one its open pull took: none is
	// acknowledged nor terminated, each waits for a worker that has the
	// feature (a nak'd message counts as unacknowledged until it is
	// delivered again).
	brokertest.Eventually(t, 20*time.Second, func() bool { return w.Stats().HandedBack >= 1 }, "the message handed back")
	if info := b.consumer(t); info.AckFloor.Consumer != 0 || info.NumPending+uint64(info.NumAckPending) != 6 {
		t.Errorf("consumer: %d pending, %d unacknowledged, ack floor %d: want all 6 messages still to be answered",
			info.NumPending, info.NumAckPending, info.AckFloor.Consumer)
	}
	kv, err := b.js.KeyValue(ctx, schema.AttemptsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, schema.AttemptsKey(b.run, schema.Unit{ID: "needy"})); err != jetstream.ErrKeyNotFound {
		t.Errorf("the handed-back message's attempts: %v, want none counted", err)
	}
	if s := w.Stats(); s.Completed+s.DeadLettered+s.Retry != 0 {
		t.Errorf("stats %+v: the message must be neither answered, failed nor retried", s)
	}
}

// A worker of every run skips one that needs a feature it lacks, saying
// so in that run's heartbeats every period, and serves the others.
func TestAllRunsWorkerSkipsARunItLacksAFeatureOf(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "plain"}, 10, provision.Options{})
	brokertest.Queue(t, b.js, schema.Manifest{Run: "future", Needs: []string{"warp-drive"}, WrittenBy: "v9.9.9"}, brokertest.Prompts(5))
	futureBeats := lackBeats(t, &bundle{js: b.js, run: "future"}, []string{"warp-drive"}, "v9.9.9")
	f, url := newFakeLLM(t, &fakeLLM{})
	w, _ := b.start(t, worker.Config{AllRuns: true, Window: 4, Heartbeat: 20 * time.Millisecond}, url)
	brokertest.Eventually(t, 20*time.Second, func() bool { return w.Stats().Completed == 10 }, "the plain run answered")
	brokertest.Eventually(t, 20*time.Second, func() bool { return futureBeats.Load() >= 3 }, "heartbeats of the run it lacks a feature of, every period")
	if n := f.total(); n != 10 {
		t.Errorf("%d requests, want the plain run's 10", n)
	}
}

package aggregator_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// lackEvents counts the run's throughput events that say the aggregator
// lacks want, which version by has.
func lackEvents(t *testing.T, nc *nats.Conn, want []string, by string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe(schema.ThroughputSubject(run), func(m *nats.Msg) {
		var ev schema.Throughput
		if json.Unmarshal(m.Data, &ev) == nil && slices.Equal(ev.AggregatorLacks, want) &&
			ev.AggregatorLacksWrittenBy == by && ev.AggregatorVersion == schema.BuildVersion() {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &n
}

// An aggregator whose run needs a feature it lacks writes nothing of it,
// takes no lease, and says what it lacks in its events.
func TestAggregatorLeavesARunItLacksAFeatureOf(t *testing.T) {
	_, nc, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 10, Needs: []string{"warp-drive"}, WrittenBy: "v9.9.9"}, nil)
	publishResults(t, js, ids(0, 10))
	// The run's last event, from an aggregator that wrote 7 lines: the
	// one that lacks the feature keeps its counts.
	prev, _ := json.Marshal(schema.Throughput{Run: run, Phase: schema.PhaseSteady, Total: 10, Completed: 7, ETASec: 30})
	if _, err := js.Publish(context.Background(), schema.ThroughputSubject(run), prev); err != nil {
		t.Fatal(err)
	}
	var kept atomic.Int64
	sub, err := nc.Subscribe(schema.ThroughputSubject(run), func(m *nats.Msg) {
		var ev schema.Throughput
		if json.Unmarshal(m.Data, &ev) == nil && ev.AggregatorLacks != nil && ev.Completed == 7 && ev.ETASec < 0 {
			kept.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	events := lackEvents(t, nc, []string{"warp-drive"}, "v9.9.9")
	dir := t.TempDir()
	start(t, js, aggregator.Config{DataDir: dir})
	brokertest.Eventually(t, 20*time.Second, func() bool { return events.Load() >= 3 }, "three events saying the aggregator lacks warp-drive")
	brokertest.Eventually(t, 20*time.Second, func() bool { return kept.Load() >= 3 }, "the events to keep the run's counts (7 completed), with the ETA unknown")
	if _, err := os.Stat(filepath.Join(dir, run)); !os.IsNotExist(err) {
		t.Errorf("the run's directory: %v; want none written", err)
	}
}

// A result that needs a feature the aggregator lacks is handed back,
// uncounted, and nothing more of the run is written.
func TestAggregatorHandsBackAResultItLacksAFeatureOf(t *testing.T) {
	_, nc, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 3}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	data, _ := schema.EncodeResult(&schema.Result{Run: run, ID: "needy", Model: "m", Content: "a", FinishReason: "stop"})
	m := nats.NewMsg(schema.ResultSubject(run, schema.Unit{ID: "needy"}))
	m.Data = data
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindResult))
	m.Header.Set(schema.HeaderNeeds, "warp-drive")
	m.Header.Set(schema.HeaderWrittenBy, "v9.9.9")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	events := lackEvents(t, nc, []string{"warp-drive"}, "v9.9.9")
	dir := t.TempDir()
	a, _ := start(t, js, aggregator.Config{DataDir: dir})
	brokertest.Eventually(t, 20*time.Second, func() bool { return events.Load() >= 2 }, "events saying the aggregator lacks warp-drive")
	publishResults(t, js, ids(0, 2))
	n := events.Load()
	brokertest.Eventually(t, 20*time.Second, func() bool { return events.Load() >= n+3 }, "more events after more results came")
	if last := a.Last(); last.Completed != 0 {
		t.Errorf("%d completions written after the aggregator left the run", last.Completed)
	}
	if b, err := os.ReadFile(filepath.Join(dir, run, aggregator.CompletionsFile)); err == nil && len(b) > 0 {
		t.Errorf("completions written:\n%s", b)
	}
	c, err := js.Consumer(ctx, schema.ResultsStream, schema.ResultsConsumer(run))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Consumer != 0 {
		t.Errorf("ack floor %d: a result was acknowledged, not handed back", info.AckFloor.Consumer)
	}
}

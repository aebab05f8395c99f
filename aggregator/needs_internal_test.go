package aggregator

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// An aggregator that lacks a feature of its run stays silent while
// another holds the run's lease, and once the run is done: its events
// would hide theirs. Each announcement is followed by a marker from the
// same connection, so the subscriber has seen any event before it.
func TestLackAnnouncedOnlyWhenNoAggregatorSpeaks(t *testing.T) {
	_, nc, js := brokertest.Provisioned(t)
	m := &schema.Manifest{Run: "r", Total: 10, Needs: []string{"warp-drive"}, WrittenBy: "v9"}
	brokertest.Queue(t, js, *m, nil)
	a, err := New(Config{Run: "r", Logger: slog.New(slog.DiscardHandler)}, js)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var seen []schema.Throughput
	markers := make(chan struct{}, 8)
	sub, err := nc.Subscribe(schema.ThroughputSubject("r"), func(msg *nats.Msg) {
		if string(msg.Data) == "marker" {
			markers <- struct{}{}
			return
		}
		var ev schema.Throughput
		if json.Unmarshal(msg.Data, &ev) == nil {
			mu.Lock()
			seen = append(seen, ev)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	announced := func() int {
		t.Helper()
		a.announceLack(ctx, m, schema.LackOf(m))
		if err := a.nc.Publish(schema.ThroughputSubject("r"), []byte("marker")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-markers:
		case <-ctx.Done():
			t.Fatal("no marker")
		}
		mu.Lock()
		defer mu.Unlock()
		n := len(seen)
		seen = nil
		return n
	}

	leases, err := provision.LeasesBucket(ctx, js, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Put(ctx, schema.AggregatorLeaseKey("r"), []byte(`{"holder":"newer"}`)); err != nil {
		t.Fatal(err)
	}
	if n := announced(); n != 0 {
		t.Errorf("%d events while another aggregator holds the lease", n)
	}
	if err := leases.Delete(ctx, schema.AggregatorLeaseKey("r")); err != nil {
		t.Fatal(err)
	}
	if n := announced(); n != 1 {
		t.Errorf("%d events with no lease held, want 1", n)
	}
	done, _ := json.Marshal(schema.Throughput{Run: "r", Phase: schema.PhaseDone, Total: 10, Completed: 10})
	if _, err := js.Publish(ctx, schema.ThroughputSubject("r"), done); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 1 && seen[0].Phase == schema.PhaseDone
	}, "the done event seen")
	mu.Lock()
	seen = nil
	mu.Unlock()
	if n := announced(); n != 0 {
		t.Errorf("%d events after the run was done", n)
	}
}

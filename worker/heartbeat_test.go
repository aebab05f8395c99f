package worker_test

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/metrics/metricstest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// A heartbeat names the worker's host and its backend, and the backend
// as the worker was given it: the client refuses a URL with credentials
// or a query, so none can reach an event.
func TestHeartbeatNamesHostAndBackend(t *testing.T) {
	b := setup(t, 5, provision.Options{})
	_, url := newFakeLLM(t, &fakeLLM{duration: 10 * time.Millisecond})
	hb := b.heartbeats(t)
	b.start(t, worker.Config{Window: 2, Heartbeat: 50 * time.Millisecond}, url+"/v1/")
	brokertest.Eventually(t, 20*time.Second, func() bool { return hb.last() != nil }, "a heartbeat")
	h := hb.last()
	host, _ := os.Hostname()
	if h.Host != host {
		t.Errorf("heartbeat host %q, want %q", h.Host, host)
	}
	if h.Backend != strings.TrimSuffix(url, "/") {
		t.Errorf("heartbeat backend %q, want %q", h.Backend, url)
	}
}

// A heartbeat's in_flight counts the prompts delivered and not settled,
// not the window slots a pull has reserved for prompts that may never
// come: while a slow backend holds every prompt of a small run it is that
// number, not the window, and once all are settled it is zero although a
// pull still waits for more. The Prometheus gauge and Stats agree.
func TestHeartbeatInFlightCountsHeldPrompts(t *testing.T) {
	const prompts, window = 3, 10
	b := setup(t, prompts, provision.Options{})
	release := make(chan struct{})
	f, url := newFakeLLM(t, &fakeLLM{hold: release})
	beats := make(chan schema.Heartbeat, 1024)
	sub, err := b.js.Conn().Subscribe(schema.HeartbeatFilter(b.run), func(m *nats.Msg) {
		var hb schema.Heartbeat
		if err := json.Unmarshal(m.Data, &hb); err != nil {
			t.Errorf("undecodable heartbeat: %v", err)
			return
		}
		select {
		case beats <- hb:
		default: // unread for 20s: the waits below have failed by then
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	reg := prometheus.NewRegistry()
	w, _ := b.start(t, worker.Config{Window: window, Heartbeat: 20 * time.Millisecond, Metrics: reg}, url)
	var once sync.Once
	answer := func() { once.Do(func() { close(release) }) }
	t.Cleanup(answer) // before the worker stops, should the test end early

	// steady waits for a heartbeat saying want, then requires the next
	// few to say it too, so that no passing moment is taken for a state.
	steady := func(want int, what string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		same, last := 0, -1
		for same < 5 {
			select {
			case hb := <-beats:
				last = hb.InFlight
				switch {
				case hb.InFlight == want:
					same++
				case same > 0:
					t.Fatalf("%s: heartbeat in_flight %d after %d saying %d", what, hb.InFlight, same, want)
				}
			case <-deadline:
				t.Fatalf("%s: heartbeats never settled on in_flight %d (last %d)", what, want, last)
			}
		}
	}
	gauge := func() float64 {
		v, _ := metricstest.Gather(t, reg).Sum("aerie_worker_prompts_in_flight")
		return v
	}

	brokertest.Eventually(t, 20*time.Second, func() bool { n, _ := f.snapshot(); return n == prompts }, "every prompt at the backend")
	steady(prompts, "prompts held by the backend")
	if got := gauge(); got != prompts {
		t.Errorf("aerie_worker_prompts_in_flight %v while %d prompts are held, want %d", got, prompts, prompts)
	}
	if got := w.Stats().InFlight; got != prompts {
		t.Errorf("Stats().InFlight %d while %d prompts are held, want %d", got, prompts, prompts)
	}

	answer()
	b.waitSettled(t, 20*time.Second)
	steady(0, "every prompt settled, the worker idle")
	if got := gauge(); got != 0 {
		t.Errorf("aerie_worker_prompts_in_flight %v with every prompt settled, want 0", got)
	}
	if s := w.Stats(); s.InFlight != 0 || s.MaxInFlight != prompts {
		t.Errorf("Stats: in flight %d, most %d; want 0, %d", s.InFlight, s.MaxInFlight, prompts)
	}
}

package aggregator_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
)

// A run with prompts left whose live workers hold none of them is
// waiting for slots, from its second such event: events say so, with the
// run's priority as `aerie runs set` changes it, until a worker holds
// one of its prompts again; a run whose workers are all paused is not.
func TestWaitingForSlots(t *testing.T) {
	_, nc, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 10, Schedule: schema.Schedule{Priority: 2}}, brokertest.Prompts(10))
	var mu sync.Mutex
	var last schema.Throughput
	start(t, js, aggregator.Config{DataDir: t.TempDir(), EventInterval: 20 * time.Millisecond,
		OnEvent: func(s schema.Throughput) {
			mu.Lock()
			defer mu.Unlock()
			last = s
		}})
	beat := func(inFlight int, paused bool) {
		hb, _ := json.Marshal(schema.Heartbeat{Run: run, Worker: "w", Time: time.Now(), Window: 8, InFlight: inFlight, Paused: paused, PausedReason: "x"})
		if err := nc.Publish(schema.HeartbeatSubject(run, "w"), hb); err != nil {
			t.Fatal(err)
		}
	}
	now := func() schema.Throughput {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
	// A heartbeat with nothing in flight: waiting for slots, priority 2.
	brokertest.Eventually(t, 10*time.Second, func() bool { beat(0, false); s := now(); return s.WaitingForSlots && s.Priority == 2 }, "an event waiting for slots at priority 2")
	seven := 7
	if _, _, err := runs.SetSchedule(context.Background(), js, run, runs.ScheduleChange{Priority: &seven}, runs.Options{}); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool { beat(0, false); return now().Priority == 7 }, "the new priority in events")
	brokertest.Eventually(t, 10*time.Second, func() bool { beat(3, false); return !now().WaitingForSlots }, "slots again once a worker holds prompts")
	brokertest.Eventually(t, 10*time.Second, func() bool {
		beat(0, true)
		return now().Workers > 0 && !now().WaitingForSlots && len(now().PausedWorkers) > 0
	}, "a paused worker is no slot given elsewhere")
}

package worker_test

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// A slow worker that holds back from the long prompts at the head of a
// run ordered longest first says so in its heartbeats (hint_hold), as it
// says a tail hold, so that the other workers count on it to pull none
// and its operator sees why it is idle.
func TestHintHoldIsInHeartbeats(t *testing.T) {
	const prompts, window = 200, 8
	slow := simulator.Config{Model: "test-model", MaxNumSeqs: window, StepBase: 60 * time.Millisecond, StepPerSeq: -1, PrefillPerToken: -1,
		OutputMedian: 40, OutputSigma: 0.8, ReasoningShare: -1}
	fast := slow
	fast.MaxNumSeqs, fast.Speed = 64, 20
	ps := brokertest.Prompts(prompts)
	ps = longestFirst(ps, plannedLengths(t, slow, ps))
	b := setupPrompts(t, schema.Manifest{Run: "test"}, ps, provision.Options{})

	var held atomic.Bool
	var slowName atomic.Value
	slowName.Store("")
	sub, err := b.js.Conn().Subscribe(schema.HeartbeatFilter(b.run), func(m *nats.Msg) {
		var hb schema.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil && hb.Worker == slowName.Load().(string) && hb.HintHold && !hb.Paused {
			held.Store(true)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	ws, _ := b.start(t, tailCfg(window), simtest.Serve(t, slow))
	slowName.Store(ws.Name())
	wf, _ := b.start(t, tailCfg(64), simtest.Serve(t, fast))
	b.waitSettled(t, 2*time.Minute)
	waitCounted(t, prompts, ws, wf)
	if !held.Load() {
		t.Errorf("no heartbeat of the slow worker said it held back for hints (handed back %d for its hints)", ws.Stats().TailHandedBack)
	}
}

package worker_test

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// tailCfg is a worker's config for the tail tests: quick polls and
// heartbeats.
func tailCfg(window int) worker.Config {
	return worker.Config{Window: window, WindowPoll: 50 * time.Millisecond, Heartbeat: 100 * time.Millisecond}
}

// slowSim answers two requests at a time, about 0.6 s each.
func slowSim(t *testing.T) string {
	return simtest.Serve(t, simulator.Config{Model: "test-model", MaxNumSeqs: 2, OutputMedian: 20, OutputSigma: 0.01, ReasoningShare: -1})
}

// Near the end of a run the worker of a slow server stops pulling, and
// the worker of a fast one takes the rest; each prompt is answered once.
func TestSlowWorkerHoldsBackForTheTail(t *testing.T) {
	const prompts = 600
	b := setup(t, prompts, provision.Options{})
	fast := simtest.Serve(t, simulator.Config{Model: "test-model", MaxNumSeqs: 64, Speed: 20, OutputMedian: 20, OutputSigma: 0.01, ReasoningShare: -1})
	ws, _ := b.start(t, tailCfg(2), slowSim(t))
	// Its own time per prompt known first.
	brokertest.Eventually(t, 30*time.Second, func() bool { return ws.Stats().Completed >= 2 }, "the slow worker to answer two prompts")
	wf, _ := b.start(t, tailCfg(64), fast)
	b.waitSettled(t, 2*time.Minute)
	waitCounted(t, prompts, ws, wf)

	s, f := ws.Stats(), wf.Stats()
	if s.TailHolds == 0 {
		t.Errorf("the slow worker never held back (completed %d, the fast one %d)", s.Completed, f.Completed)
	}
	if f.Completed <= s.Completed {
		t.Errorf("the fast worker completed %d, the slow one %d", f.Completed, s.Completed)
	}
	if s.Completed+f.Completed != prompts || s.DeadLettered+f.DeadLettered != 0 {
		t.Errorf("completed %d + %d, dead-lettered %d + %d; want %d completed", s.Completed, f.Completed, s.DeadLettered, f.DeadLettered, prompts)
	}
	if n := len(b.stored(t, schema.ResultsStream)); n != prompts {
		t.Errorf("%d results stored, want %d", n, prompts)
	}
}

// A worker alone never holds back: it answers every prompt.
func TestLoneWorkerNeverHoldsBack(t *testing.T) {
	const prompts = 8
	b := setup(t, prompts, provision.Options{})
	w, _ := b.start(t, tailCfg(2), slowSim(t))
	b.waitSettled(t, time.Minute)
	waitCounted(t, prompts, w)
	if s := w.Stats(); s.Completed != prompts || s.TailHolds != 0 {
		t.Errorf("completed %d, held back %d times; want %d completed and no hold", s.Completed, s.TailHolds, prompts)
	}
}

// A worker holding back for a peer that then falls silent pulls again
// and finishes the run.
func TestTailHoldEndsWhenThePeerFallsSilent(t *testing.T) {
	const prompts = 30
	b := setup(t, prompts, provision.Options{})
	w, _ := b.start(t, tailCfg(2), slowSim(t))
	brokertest.Eventually(t, 30*time.Second, func() bool { return w.Stats().Completed >= 2 }, "the worker to answer two prompts")

	// A peer that says it completes a thousand prompts a heartbeat.
	nc := b.js.Conn()
	var silent atomic.Bool
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for n := int64(0); !silent.Load(); n += 1000 {
			data, _ := json.Marshal(schema.Heartbeat{Run: b.run, Worker: "peer", Time: time.Now().UTC(), Window: 8, InFlight: 0, Completed: n})
			_ = nc.Publish(schema.HeartbeatSubject(b.run, "peer"), data)
			<-tick.C
		}
	}()
	brokertest.Eventually(t, 30*time.Second, func() bool { return w.Stats().TailHolds > 0 }, "the worker to hold back for its peer")
	if c := w.Stats().Completed; c == prompts {
		t.Fatalf("all %d prompts completed while holding back", c)
	}
	silent.Store(true)
	<-beats
	b.waitSettled(t, time.Minute)
	waitCounted(t, prompts, w)
	if s := w.Stats(); s.Completed != prompts {
		t.Errorf("completed %d, want %d", s.Completed, prompts)
	}
}

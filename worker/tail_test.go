package worker_test

import (
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// At the end of a run, the prompts queued without a first token inside a
// slow server are handed back to a worker that is idle, and each prompt
// is still answered exactly once.
func TestTailHandedBackToAnIdleWorker(t *testing.T) {
	const prompts, window = 40, 20
	b := setup(t, prompts, provision.Options{})
	// Two requests at a time, about three seconds each: the other 18 of
	// the slow worker's window wait in the server's queue.
	slow := simtest.Serve(t, simulator.Config{Model: "test-model", MaxNumSeqs: 2, OutputMedian: 100, OutputSigma: 0.01, ReasoningShare: -1})
	fast := simtest.Serve(t, simulator.Config{Model: "test-model", MaxNumSeqs: 64, Speed: 20, OutputMedian: 20, ReasoningShare: -1})
	cfg := worker.Config{Window: window, HandBackAfter: 300 * time.Millisecond, WindowPoll: 50 * time.Millisecond, Heartbeat: 100 * time.Millisecond}
	ws, _ := b.start(t, cfg, slow)
	brokertest.Eventually(t, 30*time.Second, func() bool { return ws.Stats().InFlight == window }, "the slow worker to fill its window")
	wf, _ := b.start(t, cfg, fast)
	b.waitSettled(t, 2*time.Minute)
	waitCounted(t, prompts, ws, wf)

	s, f := ws.Stats(), wf.Stats()
	if s.TailHandedBack == 0 {
		t.Fatalf("the slow worker handed back nothing (completed %d, the fast one %d)", s.Completed, f.Completed)
	}
	if s.TailHandedBack > window-2 {
		t.Errorf("handed back %d, more than the %d that never started", s.TailHandedBack, window-2)
	}
	if f.Completed <= prompts-window {
		t.Errorf("the fast worker completed %d, want more than the %d the slow one never held", f.Completed, prompts-window)
	}
	if s.Completed+f.Completed != prompts || s.DeadLettered+f.DeadLettered != 0 {
		t.Errorf("completed %d + %d, dead-lettered %d + %d; want %d completed", s.Completed, f.Completed, s.DeadLettered, f.DeadLettered, prompts)
	}
	results := b.stored(t, schema.ResultsStream)
	if len(results) != prompts {
		t.Errorf("%d results stored, want %d", len(results), prompts)
	}
	if s.Window > window {
		t.Errorf("the slow worker's window is %d, above its fixed %d", s.Window, window)
	}
}

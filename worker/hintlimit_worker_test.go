package worker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// A slow worker that took the longest prompts of a run ordered longest
// first, before it knew that another worker is much faster, hands them
// back as soon as it does, and then leaves the long ones to the fast
// worker: none of the longest is answered by the slow one, and every
// prompt is answered once.
func TestSlowWorkerLeavesLongHintsToTheFast(t *testing.T) {
	const prompts, window, longest = 200, 8, 8
	slow := simulator.Config{Model: "test-model", MaxNumSeqs: window, StepBase: 60 * time.Millisecond, StepPerSeq: -1, PrefillPerToken: -1,
		OutputMedian: 40, OutputSigma: 0.8, ReasoningShare: -1}
	fast := slow
	fast.MaxNumSeqs, fast.Speed = 64, 20
	ps := brokertest.Prompts(prompts)
	ps = longestFirst(ps, plannedLengths(t, slow, ps))

	b := setupPrompts(t, schema.Manifest{Run: "test"}, ps, provision.Options{})

	// The slow worker alone first: it takes the head of the queue.
	ws, _ := b.start(t, tailCfg(window), simtest.Serve(t, slow))
	brokertest.Eventually(t, 30*time.Second, func() bool { return ws.Stats().InFlight == window }, "the slow worker to take %d prompts", window)
	wf, _ := b.start(t, tailCfg(64), simtest.Serve(t, fast))
	b.waitSettled(t, 2*time.Minute)
	waitCounted(t, prompts, ws, wf)

	results := b.results(t)
	if len(results) != prompts {
		t.Fatalf("%d results, want %d", len(results), prompts)
	}
	for _, p := range ps[:longest] {
		if r := results[p.ID]; r.Worker == ws.Name() {
			t.Errorf("prompt %s (hint %d, %d tokens) answered by the slow worker", p.ID, p.LengthHint, r.CompletionTokens)
		}
	}
	s, f := ws.Stats(), wf.Stats()
	if s.TailHandedBack < longest {
		t.Errorf("the slow worker handed back %d prompts, want at least the %d it took first", s.TailHandedBack, longest)
	}
	var slowHints []int
	for _, r := range results {
		if r.Worker == ws.Name() {
			slowHints = append(slowHints, r.LengthHint)
		}
	}
	slices.Sort(slowHints)
	t.Logf("slow worker: completed %d (hints %v), handed back %d; fast worker: completed %d", s.Completed, slowHints, s.TailHandedBack, f.Completed)
}

package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/worker"
)

// hedgeFleet starts a run of six prompts on two workers of three slots:
// a slow one, which takes the first three, then a fast one, ten times
// faster per request, which takes the other three and finds the queue
// empty while the slow one still generates. fast configures the fast
// server.
func hedgeFleet(t *testing.T, fast *fakeLLM, cfg worker.Config) (b *bundle, slowLLM *fakeLLM, slow, quick *worker.Worker) {
	t.Helper()
	b = setup(t, 6, provision.Options{})
	slowLLM, slowURL := newFakeLLM(t, &fakeLLM{tokens: 60, step: 50 * time.Millisecond})
	_, fastURL := newFakeLLM(t, fast)
	cfg.Window, cfg.Heartbeat, cfg.WindowPoll = 3, 50*time.Millisecond, 50*time.Millisecond
	cfg.Name = "slow"
	slow, _ = b.start(t, cfg, slowURL)
	brokertest.Eventually(t, 10*time.Second, func() bool { in, _ := slowLLM.snapshot(); return in == 3 }, "the slow worker to take three prompts")
	cfg.Name = "fast"
	quick, _ = b.start(t, cfg, fastURL)
	return b, slowLLM, slow, quick
}

// At the end of a run, the fast worker hedges the slow one's requests:
// its answers are stored first, the slow worker's requests are
// cancelled and their prompts acknowledged, and every prompt has one
// result.
func TestHedgeWinsOnTheFasterWorker(t *testing.T) {
	b, slowLLM, slow, fast := hedgeFleet(t, &fakeLLM{tokens: 60, step: 5 * time.Millisecond}, worker.Config{})
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, 6, slow, fast)
	res := b.results(t)
	if len(res) != 6 {
		t.Fatalf("%d results, want 6", len(res))
	}
	hedged := 0
	for id, r := range res {
		if r.Hedged {
			hedged++
			if r.Worker != "fast" {
				t.Errorf("%s: a hedged answer stored by %s, want fast", id, r.Worker)
			}
		}
	}
	ss, fs := slow.Stats(), fast.Stats()
	if hedged != 3 || fs.HedgesWon != 3 || ss.HedgedAway != 3 || ss.Completed != 0 || fs.Completed != 6 {
		t.Errorf("hedged results %d, fast won %d and completed %d, slow hedged away %d and completed %d: want 3, 3, 6, 3, 0",
			hedged, fs.HedgesWon, fs.Completed, ss.HedgedAway, ss.Completed)
	}
	if ss.HedgedTokens == 0 {
		t.Error("the slow worker threw away no tokens, though its requests were cancelled mid-stream")
	}
	// Cancelled, not left to run out: the slow server is idle at once.
	brokertest.Eventually(t, 10*time.Second, func() bool { in, _ := slowLLM.snapshot(); return in == 0 }, "the slow server's requests to be cancelled")
}

// A hedge that the original beats is cancelled when the original's
// answer is stored, and the original's answer is the one kept.
func TestHedgeLosesToTheOriginal(t *testing.T) {
	// The fast server stalls the slow worker's prompts (the first three)
	// after one token: only the originals can answer them.
	stall := func(prompt string, _ int) bool {
		return strings.HasSuffix(prompt, "p0000") || strings.HasSuffix(prompt, "p0001") || strings.HasSuffix(prompt, "p0002")
	}
	fastLLM := &fakeLLM{tokens: 60, step: 5 * time.Millisecond, stall: stall}
	b, _, slow, fast := hedgeFleet(t, fastLLM, worker.Config{})
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, 6, slow, fast)
	res := b.results(t)
	for id, r := range res {
		if r.Hedged {
			t.Errorf("%s: the hedge's answer was stored, though its server stalled", id)
		}
	}
	brokertest.Eventually(t, 10*time.Second, func() bool { in, _ := fastLLM.snapshot(); return in == 0 }, "the stalled hedges to be cancelled")
	ss, fs := slow.Stats(), fast.Stats()
	if fs.Hedges == 0 || fs.HedgesWon != 0 || ss.Completed != 3 || fs.Completed != 3 {
		t.Errorf("fast sent %d hedges and won %d, completed %d; slow completed %d: want some, 0, 3, 3", fs.Hedges, fs.HedgesWon, fs.Completed, ss.Completed)
	}
}

// With --hedge off nothing is hedged: the slow worker answers its own.
func TestHedgeOff(t *testing.T) {
	b, _, slow, fast := hedgeFleet(t, &fakeLLM{tokens: 60, step: 5 * time.Millisecond}, worker.Config{HedgeOff: true})
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, 6, slow, fast)
	ss, fs := slow.Stats(), fast.Stats()
	if fs.Hedges != 0 || ss.Completed != 3 {
		t.Errorf("with --hedge off: %d hedges, slow completed %d, want 0 and 3", fs.Hedges, ss.Completed)
	}
}

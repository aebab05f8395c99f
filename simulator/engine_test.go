package simulator

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// finishRecord is one completed request in a simulated run.
type finishRecord struct {
	at     time.Duration // simulated time of the last token
	tokens int
}

// calibrationPrompt is prompt i of a run: distinct text of about 1,000
// tokens, the prompt size the default calibration assumes.
func calibrationPrompt(i int) []Message {
	head := fmt.Sprintf("prompt %d: ", i)
	return userMessages(head + strings.Repeat("x", 3960-len(head)))
}

// simulateRun replays clients closed-loop clients sending total requests
// through an engine in simulated time only (no wall clock), and returns
// the completions in order, the engine's stats sampled at midway and at
// the end, and the highest KV cache usage seen.
func simulateRun(t *testing.T, cfg Config, clients, total int) (done []finishRecord, mid, end Stats, peakKV float64) {
	t.Helper()
	cfg = cfg.WithDefaults()
	e := newEngine(cfg)
	next := 0
	submit := func() {
		m := calibrationPrompt(next)
		next++
		prompt := promptTokens(m)
		e.enqueue(newSequence(prompt, cfg.plan(m, cfg.MaxModelLen-prompt)))
	}
	e.onFinish = func(s *sequence) {
		done = append(done, finishRecord{at: e.clock, tokens: s.answer.tokens})
		if next < total {
			submit()
		}
	}
	e.mu.Lock()
	for range clients {
		submit()
	}
	e.mu.Unlock()
	for len(done) < total {
		e.mu.Lock()
		e.credit += 100 * time.Millisecond
		e.advance()
		e.fresh = e.fresh[:0]
		peakKV = max(peakKV, float64(e.kvBlocks)/float64(e.kvCap))
		e.mu.Unlock()
		if len(done) == total/2 && mid.Running == 0 {
			mid, _ = e.snapshot()
		}
		if e.clock > 24*time.Hour {
			t.Fatalf("run did not finish: %d of %d done", len(done), total)
		}
	}
	end, _ = e.snapshot()
	return done, mid, end, peakKV
}

func meanTokens(r []finishRecord) float64 {
	sum := 0
	for _, f := range r {
		sum += f.tokens
	}
	return float64(sum) / float64(len(r))
}

// TestCalibration checks that the defaults reproduce the shape of the
// reference run (200 clients): a slow ramp where the first finishers are
// the short answers, about 1.4 requests/s in steady state, then a tail
// where the batch drains.
func TestCalibration(t *testing.T) {
	const clients, total = 200, 3000
	done, mid, end, peakKV := simulateRun(t, Config{}, clients, total)

	at65 := 0
	for _, f := range done {
		if f.at <= 65*time.Second {
			at65++
		}
	}
	first10, first40, all := meanTokens(done[:10]), meanTokens(done[:40]), meanTokens(done)
	// Steady state: between the 20% and 80% completions.
	a, b := done[total/5], done[4*total/5]
	steady := float64(4*total/5-total/5) / (b.at - a.at).Seconds()
	// Tail: the last 5% of completions, once no new work arrives,
	// come in more slowly than the same number in steady state.
	tailSpan := done[total-1].at - done[total-total/20].at
	steadySpan := time.Duration(float64(total/20) / steady * float64(time.Second))
	t.Logf("done at 65s: %d; mean tokens first 10: %.0f, first 40: %.0f, all: %.0f", at65, first10, first40, all)
	t.Logf("steady %.2f req/s (25,000 prompts in %.1f h); tail of last %d took %v vs %v in steady state; KV usage at midway %.2f",
		steady, 25000/steady/3600, total/20, tailSpan.Round(time.Second), steadySpan.Round(time.Second), mid.KVCacheUsage)

	check := func(name string, got, lo, hi float64) {
		t.Helper()
		if got < lo || got > hi {
			t.Errorf("%s = %.2f, want in [%v, %v]", name, got, lo, hi)
		}
	}
	check("completions by 65s", float64(at65), 25, 60)
	check("mean tokens of first 10", first10, 120, 420)
	check("mean tokens of first 40", first40, 250, 520)
	check("steady requests/s", steady, 1.25, 1.6)
	check("mean tokens", all, 1800, 2700)
	if all < 4*first40 {
		t.Errorf("mean %.0f is not far above the early mean %.0f", all, first40)
	}
	if tailSpan < 2*steadySpan {
		t.Errorf("no draining tail: last %d took %v, %v in steady state", total/20, tailSpan, steadySpan)
	}
	check("KV usage at midway", mid.KVCacheUsage, 0.4, 0.95)
	// The default cache holds the calibrated load with room to spare:
	// nothing is preempted, so timings are those of the reference run.
	check("peak KV usage", peakKV, 0.4, 0.85)
	if end.Preemptions != 0 {
		t.Errorf("%d preemptions at the default KV cache size, want none", end.Preemptions)
	}
}

func TestEngineRespectsMaxNumSeqs(t *testing.T) {
	cfg := Config{MaxNumSeqs: 3, OutputMedian: 20, OutputSigma: 0.5}.WithDefaults()
	e := newEngine(cfg)
	seqs := make([]*sequence, 8)
	for i := range seqs {
		m := userMessages(fmt.Sprint(i))
		seqs[i] = newSequence(promptTokens(m), cfg.plan(m, 1000))
		if err := e.submit(seqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	maxRunning := 0
	for range 10_000 {
		e.tick(10 * time.Millisecond)
		st, _ := e.snapshot()
		maxRunning = max(maxRunning, st.Running)
		if st.Completed == int64(len(seqs)) {
			break
		}
	}
	st, _ := e.snapshot()
	if st.Completed != int64(len(seqs)) {
		t.Fatalf("completed %d of %d", st.Completed, len(seqs))
	}
	if maxRunning != 3 {
		t.Errorf("max running %d, want 3", maxRunning)
	}
	var want int64
	for _, s := range seqs {
		want += int64(s.answer.tokens)
		if got := s.tokens.Load(); got != int64(s.answer.tokens) {
			t.Errorf("sequence published %d of %d tokens", got, s.answer.tokens)
		}
	}
	if st.GenerationTokens != want {
		t.Errorf("generation tokens %d, want %d", st.GenerationTokens, want)
	}
}

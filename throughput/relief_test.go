package throughput

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// arrivals plays intervals heartbeats 2 s apart of a worker holding 200
// requests, with 20 to 40 prompts sent in each interval and the
// per-request speed that speed gives for the prompts sent per second.
// each gets every heartbeat and the prompts sent since the one before
// (none before the first); completed, the heartbeat's counter, counts
// them as the answers that freed their slots.
func arrivals(intervals int, seed uint64, speed func(perSec float64) float64, each func(hb schema.Heartbeat, sent int)) {
	rng := rand.New(rand.NewPCG(seed, 11))
	at := simEpoch
	var tokens, completed int64
	inFlight := make([]int, 200)
	for i := range inFlight {
		inFlight[i] = 100
	}
	beat := func(sent int) {
		each(schema.Heartbeat{Run: "r", Worker: "w", Time: at, Window: 200, InFlight: 200,
			InFlightTokens: inFlight, TokensStreamed: tokens, Completed: completed}, sent)
	}
	beat(0)
	for range intervals {
		sent := 20 + rng.IntN(21)
		tokens += int64(math.Round(speed(float64(sent)/2) * 200 * 2))
		completed += int64(sent)
		at = at.Add(2 * time.Second)
		beat(sent)
	}
}

// reliefWorker is a worker fed arrivals, and the mean of the prompts
// sent per second.
func reliefWorker(intervals int, speed func(perSec float64) float64) (*worker, float64) {
	w := &worker{}
	sum := 0.0
	arrivals(intervals, 7, speed, func(hb schema.Heartbeat, sent int) {
		w.observe(hb, time.Hour)
		sum += float64(sent) / 2
	})
	return w, sum / float64(max(intervals, 1))
}

// TestReliefFromArrivals checks the fit against a step of known cost:
// A = 50 ms of decoding plus 0.04 ms per prompt token read, prompts of
// 1,000 tokens, so c = 40 ms per prompt. A request's speed is
// (1 − c·π)/A for π prompts a second; at the mean of 15 a second prefill
// takes 60% of the time, and the requests decode 2.5 times as fast once
// none arrive.
func TestReliefFromArrivals(t *testing.T) {
	const a, c = 0.050, 0.040
	prefill := func(perSec float64) float64 { return (1 - c*perSec) / a }
	w, mean := reliefWorker(60, prefill)
	r, ok := reliefSince([]*worker{w}, simEpoch)
	if !ok {
		t.Fatal("no fit from 60 intervals")
	}
	// The speed at no arrivals over the speed at their mean (the speed is
	// linear in them, so that is the mean speed).
	want := prefill(0) / prefill(mean)
	if math.Abs(r.factor/want-1) > 0.03 {
		t.Errorf("relief %.3f, want %.3f", r.factor, want)
	}

	// Each request at its own speed whatever arrives: no relief.
	flat, _ := reliefWorker(60, func(float64) float64 { return 20 })
	if r, ok := reliefSince([]*worker{flat}, simEpoch); !ok || r.factor != 1 {
		t.Errorf("speed independent of arrivals: relief %v (fitted %v), want 1", r.factor, ok)
	}
	// Too short a history to tell a slope from noise.
	short, _ := reliefWorker(minReliefIntervals-1, prefill)
	if _, ok := reliefSince([]*worker{short}, simEpoch); ok {
		t.Errorf("fitted from %d intervals, want no fit", minReliefIntervals-1)
	}
	// Only intervals from since on count.
	if _, ok := reliefSince([]*worker{w}, simEpoch.Add(2*time.Minute)); ok {
		t.Error("fitted from intervals before since")
	}
	if got, ok := fleetRelief([]*worker{flat, short}, simEpoch); !ok || got != 1 {
		t.Errorf("fleet of a flat worker and one too short: relief %v (fitted %v), want 1", got, ok)
	}
	if _, ok := fleetRelief([]*worker{short}, simEpoch); ok {
		t.Error("fleet of one worker too short to fit: fitted")
	}
	if got, _ := fleetRelief([]*worker{w, w}, simEpoch); math.Abs(got-r.factor) > 1e-9 {
		t.Errorf("two identical workers: relief %v, want %v", got, r.factor)
	}
}

// TestReliefCounterReset checks that a worker restarted under the same
// name, its Completed counter back at zero, does not read as a burst of
// arrivals, and that arrivals count the change in requests in flight.
func TestReliefCounterReset(t *testing.T) {
	w := &worker{}
	hb := func(sec int, completed int64, inFlight int) {
		w.observe(schema.Heartbeat{Run: "r", Worker: "w", Time: simEpoch.Add(time.Duration(sec) * time.Second),
			Window: 200, InFlight: inFlight, Completed: completed}, time.Hour)
	}
	hb(0, 500, 100)
	hb(2, 530, 120) // 30 ended, 20 more in flight
	hb(4, 3, 120)   // restarted
	hb(6, 10, 110)
	want := []float64{-1, 50, -1, 0}
	for i, s := range w.samples {
		if s.started != want[i] {
			t.Errorf("sample %d: started %v, want %v", i, s.started, want[i])
		}
	}
	if st := w.overIdle(time.Minute); st.seconds != 2 {
		t.Errorf("idle intervals cover %v s, want 2 (the last only)", st.seconds)
	}
}

// TestDecodeModelRelief checks that the relief speeds up every request
// of the drain, and none beside another run's requests, whose prompts
// keep arriving.
func TestDecodeModelRelief(t *testing.T) {
	d := newDecodeModel(10, 2, 2, 0.5, 0, 3)
	if got := d.at(2); got != 30 {
		t.Errorf("at the batch measured: %v tokens/s, want 30 (relief 3)", got)
	}
	if got, want := d.at(1), 30*4.0/3; math.Abs(got-want) > 1e-9 {
		t.Errorf("alone: %v tokens/s, want %v", got, want)
	}
	if got := newDecodeModel(10, 2, 4, 0.5, 2, 3).at(2); got != 10 {
		t.Errorf("beside another run: %v tokens/s, want 10 (no relief)", got)
	}
	if got := newDecodeModel(10, 2, 2, 0.5, 0, 0).at(2); got != 10 {
		t.Errorf("relief 0: %v tokens/s, want 10 (counts as none)", got)
	}
}

// TestPrefillReliefInEvents checks the estimator end to end: heartbeats
// whose speed falls with the prompts sent, and the completions that free
// the slots, give a steady-state event with the relief that step cost
// implies (2.5 at 15 prompts a second; see TestReliefFromArrivals).
func TestPrefillReliefInEvents(t *testing.T) {
	est := New(Config{Run: "r", Total: 100000}, simEpoch)
	const a, c = 0.050, 0.040
	rng := rand.New(rand.NewPCG(3, 5))
	beats, sum, n := 0, 0.0, 0
	arrivals(150, 3, func(perSec float64) float64 { return (1 - c*perSec) / a }, func(hb schema.Heartbeat, sent int) {
		if beats == 12 {
			// Steady (200 answers written), with too few intervals yet.
			if ev := est.Snapshot(hb.Time); ev.Phase != schema.PhaseSteady || ev.PrefillRelief != 0 {
				t.Errorf("steady for a few intervals: phase %s, prefill_relief %v, want absent", ev.Phase, ev.PrefillRelief)
			}
		}
		for range sent {
			est.Completed(hb.Time.Add(-time.Second), Single(40+rng.IntN(400), false))
		}
		est.Heartbeat(hb)
		// An event every interval, as the aggregator takes them; the
		// fit sees the last five minutes.
		est.Snapshot(hb.Time)
		if beats > 30 {
			sum += float64(sent) / 2
			n++
		}
		beats++
	})
	ev := est.Snapshot(simEpoch.Add(300 * time.Second))
	if ev.Phase != schema.PhaseSteady {
		t.Fatalf("phase %s, want steady", ev.Phase)
	}
	want := 1 / (1 - c*sum/float64(n))
	if math.Abs(ev.PrefillRelief/want-1) > 0.05 {
		t.Errorf("prefill_relief %v, want %.2f within 5%%", ev.PrefillRelief, want)
	}
}

// TestReliefSharedBackend checks two workers of one backend, each
// sending its own share of the prompts and heard at its own times: the
// backend's speed follows the prompts both send, so fitted on one
// worker's prompts alone the relief comes out far too low, and fitted
// together it is what the step cost gives.
func TestReliefSharedBackend(t *testing.T) {
	const a, c, blocks = 0.050, 0.040, 150
	rng := rand.New(rand.NewPCG(9, 4))
	// Per block of 2 s: each worker's prompts sent, and the speed of
	// every request, set by both workers' prompts together.
	sent := [2][]float64{}
	speed := make([]float64, blocks)
	sum := 0.0
	for k := range blocks {
		x, y := float64(10+rng.IntN(11)), float64(10+rng.IntN(11))
		sent[0], sent[1] = append(sent[0], x), append(sent[1], y)
		speed[k] = (1 - c*(x+y)/2) / a
		sum += (x + y) / 2
	}
	// at returns a worker's cumulative prompts and tokens at s seconds,
	// both accruing evenly within a block.
	at := func(w int, s float64) (prompts, tokens float64) {
		for k := range blocks {
			f := min(max(s-2*float64(k), 0)/2, 1)
			prompts += f * sent[w][k]
			tokens += f * speed[k] * 100 * 2 // 100 requests of each worker
		}
		return prompts, tokens
	}
	inFlight := make([]int, 100)
	for i := range inFlight {
		inFlight[i] = 50
	}
	workers := make([]*worker, 2)
	for i, offset := range []float64{0, 0.7} {
		workers[i] = &worker{}
		for s := offset; s <= 2*blocks; s += 2 {
			p, tok := at(i, s)
			workers[i].observe(schema.Heartbeat{Run: "r", Worker: fmt.Sprint("w", i), Backend: "http://gpu-1:8000",
				Time: simEpoch.Add(time.Duration(s * float64(time.Second))), Window: 100, InFlight: 100,
				InFlightTokens: inFlight, TokensStreamed: int64(tok), Completed: int64(p)}, time.Hour)
		}
	}
	// The other worker's tokens and prompts are taken evenly over its
	// own intervals, which straddle two blocks: that blurs the fit a
	// little, towards too little relief.
	want := 1 / (1 - c*sum/blocks)
	got, ok := fleetRelief(workers, simEpoch)
	if !ok || got < 0.9*want || got > 1.02*want {
		t.Errorf("one backend, two workers: relief %v (fitted %v), want %.2f, at most 10%% below", got, ok, want)
	}
	workers[1].backend = "http://gpu-2:8000"
	alone, _ := fleetRelief(workers, simEpoch)
	t.Logf("relief %.2f for %.2f; %.2f fitted as two backends", got, want, alone)
	if alone > 1+(want-1)/2 {
		t.Errorf("fitted as two backends: relief %v, want well below %.2f (each sees half the prompts)", alone, want)
	}
}

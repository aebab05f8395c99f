package throughput

import (
	"encoding/json"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// beat is a heartbeat of a worker streaming at a steady rate.
func beat(worker string, sec float64, tokens int64, inFlight ...int) schema.Heartbeat {
	return schema.Heartbeat{
		Run: "r", Worker: worker, Time: at(sec), Window: 4,
		InFlight: len(inFlight), InFlightTokens: inFlight, TokensStreamed: tokens,
	}
}

func TestNoHeartbeatNoETA(t *testing.T) {
	e := New(Config{Run: "r", Total: 100}, t0)
	for i := range 30 {
		e.Completed(at(float64(i)), Single(1000+10*i, false))
	}
	s := e.Snapshot(at(30))
	if s.ETASec != -1 {
		t.Errorf("ETA %v without any heartbeat, want -1", s.ETASec)
	}
	if s.TokensPerSec != 0 || s.Workers != 0 || s.InFlight != 0 {
		t.Errorf("rates or workers without heartbeats: %+v", s)
	}
	if s.EstimatedCompletionTokens <= 0 || s.RequestsPerSec <= 0 {
		t.Errorf("completions not counted: %+v", s)
	}
	// The overall token rate counts the written answers when no
	// heartbeat has: 30 answers of 1,000 to 1,290 tokens in 30 s.
	if want := float64(30*1000+10*29*30/2) / 30; math.Abs(s.TokensPerSecOverall-want) > 1e-9 {
		t.Errorf("overall tokens/s %v, want %v from the written answers", s.TokensPerSecOverall, want)
	}
}

func TestDoneETAZero(t *testing.T) {
	e := New(Config{Run: "r", Total: 3}, t0)
	e.Heartbeat(beat("w", 1, 100, 50))
	e.Completed(at(2), Single(100, false))
	e.Completed(at(3), Single(200, true))
	e.Failed(at(4), 1)
	s := e.Snapshot(at(5))
	if s.Phase != schema.PhaseDone || s.ETASec != 0 {
		t.Errorf("phase %s ETA %v, want done and 0", s.Phase, s.ETASec)
	}
	if s.Completed != 2 || s.Failed != 1 || s.Truncated != 1 {
		t.Errorf("counts %d/%d/%d, want 2/1/1", s.Completed, s.Failed, s.Truncated)
	}

	// An empty run is done from the start.
	s = New(Config{Total: 0}, t0).Snapshot(t0)
	if s.Phase != schema.PhaseDone || s.ETASec != 0 {
		t.Errorf("empty run: phase %s ETA %v", s.Phase, s.ETASec)
	}
}

func TestRestore(t *testing.T) {
	e := New(Config{Run: "r", Total: 10}, t0)
	for range 5 {
		e.Restore(Single(100, false))
	}
	e.Restore(Single(400, true))
	e.RestoreFailed(1)
	e.RestoreFailed(1)
	s := e.Snapshot(at(60))
	if s.Completed != 6 || s.Failed != 2 || s.Truncated != 1 {
		t.Errorf("counts %d/%d/%d, want 6/2/1", s.Completed, s.Failed, s.Truncated)
	}
	near(t, "mean", s.MeanCompletionTokens, 900.0/6, 1e-9)
	if s.RequestsPerSec != 0 || s.RequestsPerSecOverall != 0 {
		t.Errorf("restored answers counted in rates: %v %v", s.RequestsPerSec, s.RequestsPerSecOverall)
	}
	if s.Phase != schema.PhaseWaiting {
		t.Errorf("phase %s before any work in this process, want waiting", s.Phase)
	}
	e.Completed(at(61), Single(100, false))
	s = e.Snapshot(at(80))
	if s.Completed != 7 {
		t.Errorf("completed %d, want 7", s.Completed)
	}
	near(t, "overall rate", s.RequestsPerSecOverall, 1.0/80, 1e-9)
	if s.Phase != schema.PhaseRampUp { // working in this process, nothing turned over yet
		t.Errorf("phase %s, want ramp-up", s.Phase)
	}
}

// With --turns all the unit of work is the request: lines count in
// Completed, Failed and Truncated, while every turn counts towards
// CompletedTurns, the rates and the mean length: the turns of written
// lines, those a kept truncated turn left ungenerated, those of failed
// lines, and the finished turns live workers hold.
func TestTurnsCounted(t *testing.T) {
	e := New(Config{Run: "r", Total: 4, Requests: 14, ReportTurns: true}, t0)
	e.Restore(Answer{Requests: []Request{{CompletionTokens: 100}, {CompletionTokens: 300}}})
	e.RestoreFailed(3)
	// A five-turn conversation whose third turn was cut and kept: two
	// turns will never run.
	e.Completed(at(10), Answer{Skipped: 2, Requests: []Request{
		{CompletionTokens: 200}, {CompletionTokens: 400}, {CompletionTokens: 1000, Truncated: true},
	}})
	hb := beat("w", 11, 5000, 50)
	hb.InterimTurns = 2
	e.Heartbeat(hb)

	s := e.Snapshot(at(20))
	if s.Total != 4 || s.Completed != 2 || s.Failed != 1 || s.Truncated != 1 {
		t.Errorf("lines: total %d completed %d failed %d truncated %d, want 4/2/1/1", s.Total, s.Completed, s.Failed, s.Truncated)
	}
	// 2 + 3 written, 2 skipped, 3 failed, 2 held.
	if s.TotalTurns != 14 || s.CompletedTurns != 12 {
		t.Errorf("turns %d of %d, want 12 of 14", s.CompletedTurns, s.TotalTurns)
	}
	near(t, "mean request length", s.MeanCompletionTokens, 2000.0/5, 1e-9)
	near(t, "overall requests/s", s.RequestsPerSecOverall, 3.0/20, 1e-9)
	if s.Phase != schema.PhaseDraining { // the last line is in flight
		t.Errorf("phase %s, want draining", s.Phase)
	}

	// A replay takes the failure back, and its three turns with it.
	e.Reopened(3)
	if s := e.Snapshot(at(21)); s.Failed != 0 || s.CompletedTurns != 9 {
		t.Errorf("after the replay: failed %d, turns %d; want 0 and 9", s.Failed, s.CompletedTurns)
	}

	// Without ReportTurns (--turns last) the turn counts stay out of the
	// event.
	e2 := New(Config{Run: "r", Total: 2}, t0)
	e2.Completed(at(1), Single(10, false))
	if s := e2.Snapshot(at(2)); s.TotalTurns != 0 || s.CompletedTurns != 0 {
		t.Errorf("turns reported with --turns last: %d of %d", s.CompletedTurns, s.TotalTurns)
	}
}

func TestStaleWorkerDropsOut(t *testing.T) {
	e := New(Config{Run: "r", Total: 1000, StaleAfter: 10 * time.Second}, t0)
	for sec := 0.0; sec <= 30; sec += 2 {
		e.Heartbeat(beat("a", sec, int64(100*sec), 1, 2))
		if sec <= 10 {
			e.Heartbeat(beat("b", sec, int64(50*sec), 3, 4, 5))
		}
	}
	s := e.Snapshot(at(18)) // b last heard at 10: 8 s ago
	if s.Workers != 2 || s.InFlight != 5 {
		t.Errorf("workers %d in flight %d at 18 s, want 2 and 5", s.Workers, s.InFlight)
	}
	s = e.Snapshot(at(30)) // b silent for 20 s
	if s.Workers != 1 || s.InFlight != 2 {
		t.Errorf("workers %d in flight %d, want 1 and 2", s.Workers, s.InFlight)
	}
	near(t, "tokens/s of the live worker", s.TokensPerSec, 100, 1e-9)
	near(t, "overall tokens/s", s.TokensPerSecOverall, (3000+500)/30.0, 1e-9)

	e2 := New(Config{Run: "r", Total: 1000}, t0)
	e2.Heartbeat(beat("a", 0, 0, 1))
	e2.Heartbeat(beat("a", 2, 100, 1))
	if s := e2.Snapshot(at(11.9)); s.Workers != 1 {
		t.Errorf("worker silent for 9.9 s dropped (default StaleAfter is 10 s)")
	}
	if s := e2.Snapshot(at(12.1)); s.Workers != 0 || s.InFlight != 0 || s.TokensPerSec != 0 {
		t.Errorf("worker silent for 10.1 s still live: %+v", s)
	}
}

func TestCounterResetAndNewWorker(t *testing.T) {
	e := New(Config{Run: "r", Total: 1000}, t0)
	var tokens int64
	for sec := 0.0; sec <= 120; sec += 2 {
		switch sec {
		case 60:
			tokens = 150 // restarted under the same name, streamed 150 since
		default:
			tokens += 200
		}
		e.Heartbeat(beat("a", sec, tokens, 10))
		if sec == 70 {
			// A worker that ran long before this process started.
			e.Heartbeat(beat("old", sec, 5_000_000_000, 10))
		}
		if sec > 70 {
			e.Heartbeat(beat("old", sec, 5_000_000_000+int64(sec-70)*100, 10))
		}
		if sec == 0 {
			continue
		}
		s := e.Snapshot(at(sec + 0.5))
		// a streams 100 tokens/s, old too from 70 s on. A reset or a
		// newcomer may cost one interval's tokens, never more.
		want := 100.0
		if sec > 70 {
			want = 200
		}
		if s.TokensPerSec < 0.9*want || s.TokensPerSec > want+1 {
			t.Fatalf("at %v s: tokens/s %.1f, want about %.0f", sec, s.TokensPerSec, want)
		}
		if s.TokensPerSecOverall < 0 || s.TokensPerSecOverall > want+1 {
			t.Fatalf("at %v s: overall tokens/s %.1f", sec, s.TokensPerSecOverall)
		}
	}
	s := e.Snapshot(at(120.5))
	near(t, "tokens/s after the reset", s.TokensPerSec, 200, 1e-9)
}

func TestRatesEarlyAndLate(t *testing.T) {
	e := New(Config{Run: "r", Total: 10000}, t0)
	for sec := 0.0; sec <= 300; sec++ {
		if sec <= 200 {
			e.Completed(at(sec+0.5), Single(1000, false))
		}
		if sec == 100 {
			// A clock that jumps a day ahead and back must not spoil the
			// window for the rest of the run.
			e.Completed(at(86400), Single(1000, false))
			e.Snapshot(at(86400))
		}
		if int(sec)%2 == 0 {
			e.Heartbeat(beat("w", sec, int64(sec*40), 1, 2, 3))
		}
		switch sec {
		case 30:
			s := e.Snapshot(at(30.9))
			near(t, "req/s since start", s.RequestsPerSec, 31/30.9, 0.05)
			near(t, "tokens/s since start", s.TokensPerSec, 40, 1e-9)
		case 150:
			s := e.Snapshot(at(150.9))
			near(t, "req/s over the window", s.RequestsPerSec, 1, 0.05)
		case 290:
			s := e.Snapshot(at(290.9))
			if s.RequestsPerSec != 0 {
				t.Errorf("req/s %v a minute and a half after the last completion", s.RequestsPerSec)
			}
			near(t, "overall req/s", s.RequestsPerSecOverall, 202/290.9, 1e-9)
		}
	}
}

func TestPhasesByRule(t *testing.T) {
	e := New(Config{Run: "r", Total: 10}, t0)
	want := func(sec float64, p schema.Phase) {
		t.Helper()
		if s := e.Snapshot(at(sec)); s.Phase != p {
			t.Errorf("at %v s: phase %s, want %s", sec, s.Phase, p)
		}
	}
	want(0, schema.PhaseWaiting)
	e.Heartbeat(beat("w", 1, 0, 0, 0, 0, 0)) // window 4, 4 in flight
	want(1, schema.PhaseRampUp)
	for i := range 3 {
		e.Completed(at(2+float64(i)), Single(100, false))
	}
	want(5, schema.PhaseRampUp) // 3 of a window of 4 turned over
	e.Completed(at(5), Single(100, false))
	want(6, schema.PhaseSteady)
	e.Heartbeat(beat("w", 7, 1000, 10, 10, 10, 10)) // 4 done + 4 in flight of 10
	want(7, schema.PhaseSteady)
	e.Completed(at(8), Single(100, false))
	e.Failed(at(8), 1)
	want(8, schema.PhaseDraining) // 5 done, 1 failed, 4 in flight
	// One answer is let go of by its worker before the aggregator has
	// written it: still draining, not back to steady.
	e.Heartbeat(beat("w", 8.5, 1100, 10, 10, 10))
	want(8.5, schema.PhaseDraining)
	// A worker that goes quiet takes its prompts out of flight: they are
	// to be handed out again.
	want(120, schema.PhaseSteady)
	e.Heartbeat(beat("w", 121, 1200, 10, 10, 10, 10))
	want(121, schema.PhaseDraining)
	for range 4 {
		e.Completed(at(9), Single(100, false))
	}
	want(9, schema.PhaseDone)
}

func TestOddInputs(t *testing.T) {
	e := New(Config{Run: "r", Total: -5, Window: -1, StaleAfter: -1}, t0)
	e2 := New(Config{Run: "r", Total: 50}, t0)
	for _, e := range []*Estimator{e, e2} {
		e.Completed(at(-100), Single(-50, false))       // before start, negative length
		e.Completed(at(1e6), Single(math.MaxInt, true)) // far future, huge
		e.Failed(time.Time{}, 1)
		e.Restore(Single(-1, true))
		e.Heartbeat(schema.Heartbeat{Worker: "", Time: at(5), TokensStreamed: -10, InFlight: -3, Window: -2, InFlightTokens: []int{-5, 0, math.MaxInt}})
		e.Heartbeat(schema.Heartbeat{Worker: "", Time: at(3), TokensStreamed: 1 << 62}) // older: ignored
		e.Heartbeat(schema.Heartbeat{Worker: "x", Time: at(6), InFlight: 5})            // no per-request detail
		e.Heartbeat(schema.Heartbeat{Worker: "x", Time: at(6)})                         // same time: ignored
		e.Heartbeat(schema.Heartbeat{Worker: "x", Time: at(8), TokensStreamed: 1 << 62, InFlight: 5})
		for i := range 20 {
			e.Completed(at(float64(10-i)), Single(i*1000, i%3 == 0)) // time going backwards
		}
		for _, sec := range []float64{-10, 0, 7, 4, 1e9, 9} { // and snapshots too
			s := e.Snapshot(at(sec))
			if _, err := json.Marshal(s); err != nil {
				t.Fatalf("snapshot at %v s does not marshal: %v (%+v)", sec, err, s)
			}
			for _, v := range []float64{s.RequestsPerSec, s.RequestsPerSecOverall, s.TokensPerSec, s.TokensPerSecOverall, s.MeanCompletionTokens, s.EstimatedCompletionTokens, s.ElapsedSec} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("snapshot at %v s has a bad value: %+v", sec, s)
				}
			}
			if s.ETASec < 0 && s.ETASec != -1 {
				t.Fatalf("ETA %v", s.ETASec)
			}
		}
	}
	if s := e.Snapshot(at(10)); s.Phase != schema.PhaseDone || s.Total != 0 {
		t.Errorf("negative total: phase %s total %d", s.Phase, s.Total)
	}
}

func TestConcurrentUse(t *testing.T) {
	e := New(Config{Run: "r", Total: 100000}, t0)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				sec := float64(i)
				switch g {
				case 0:
					e.Completed(at(sec), Single(500+i, false))
				case 1:
					e.Heartbeat(beat("w", sec, int64(i*100), i%50, i%70))
				case 2:
					e.Failed(at(sec), 1)
				default:
					e.Snapshot(at(sec))
				}
			}
		})
	}
	wg.Wait()
	if s := e.Snapshot(at(500)); s.Completed != 500 || s.Failed != 500 {
		t.Errorf("counts %d/%d after concurrent use, want 500/500", s.Completed, s.Failed)
	}
}

// During ramp-up the ETA follows the decode speed of the last few
// heartbeats: here requests decode at 30 tokens/s while the batch is small
// and 20 once it is full, and the ETA must be the one for 20 tokens/s.
func TestRampUpUsesRecentSpeed(t *testing.T) {
	run := func(fastStart bool) float64 {
		e := New(Config{Run: "r", Total: 1000}, t0)
		for i := range 12 {
			e.Completed(at(float64(10+4*i)), Single(100+50*i, false))
		}
		var tokens int64
		for sec := 0.0; sec <= 60; sec += 2 {
			inFlight := make([]int, 100)
			for i := range inFlight {
				inFlight[i] = int(20 * sec) // the same progress in both runs
			}
			e.Heartbeat(schema.Heartbeat{Worker: "w", Time: at(sec), Window: 100, InFlight: 100, InFlightTokens: inFlight, TokensStreamed: tokens})
			perSeq := 20.0
			if fastStart && sec < 40 {
				perSeq = 30
			}
			tokens += int64(2 * perSeq * 100)
		}
		s := e.Snapshot(at(60.5))
		if s.Phase != schema.PhaseRampUp || s.ETASec <= 0 {
			t.Fatalf("phase %s ETA %v", s.Phase, s.ETASec)
		}
		return s.ETASec
	}
	fast, steady := run(true), run(false)
	if r := fast / steady; r < 0.98 || r > 1.02 {
		t.Errorf("ETA %.0f s after a fast start, %.0f s without: the early speed still counts", fast, steady)
	}
}

// With --turns all a worker holds conversations between two turns that
// no request stands for: they are in flight as lines, not as requests, and
// must not make the ETA count requests that are not running.
func TestConversationsBetweenTurnsAreNotRequests(t *testing.T) {
	run := func(held int) schema.Throughput {
		e := New(Config{Run: "r", Total: 400, Requests: 1000, ReportTurns: true}, t0)
		for i := range 60 {
			e.Completed(at(float64(i)/10), Answer{Requests: []Request{{CompletionTokens: 200 + 5*i}, {CompletionTokens: 300 + 3*i}}})
		}
		for s := 1; s <= 20; s++ {
			hb := beat("w", float64(s), int64(s)*4000, 100, 150, 200, 250)
			hb.InFlight = held
			e.Heartbeat(hb)
		}
		return e.Snapshot(at(20))
	}
	listed, held := run(4), run(9)
	if held.InFlight != 9 {
		t.Errorf("in flight %d, want the 9 conversations held", held.InFlight)
	}
	if listed.ETASec <= 0 || held.ETASec != listed.ETASec {
		t.Errorf("ETA %v with 5 conversations between turns, %v without: the requests running are the same", held.ETASec, listed.ETASec)
	}
}

// A heartbeat sent before the last prompts settled counts them still; the
// run's in-flight figure never exceeds the lines left, and reads zero
// once the run is done.
func TestInFlightAtMostLinesLeft(t *testing.T) {
	e := New(Config{Run: "r", Total: 3}, t0)
	e.Heartbeat(beat("a", 0, 0, 0, 0, 0))
	if s := e.Snapshot(at(1)); s.InFlight != 3 {
		t.Errorf("in flight %d with 3 prompts held, want 3", s.InFlight)
	}
	e.Completed(at(2), Single(10, false))
	e.Completed(at(2), Single(10, false))
	if s := e.Snapshot(at(2)); s.InFlight != 1 || s.Phase != schema.PhaseDraining {
		t.Errorf("in flight %d, phase %s with 1 line left, want 1, draining", s.InFlight, s.Phase)
	}
	e.Completed(at(3), Single(10, false))
	if s := e.Snapshot(at(3)); s.InFlight != 0 || s.Phase != schema.PhaseDone {
		t.Errorf("in flight %d, phase %s with every line written, want 0, done", s.InFlight, s.Phase)
	}
}

package status

import (
	"testing"
	"time"
)

// A heartbeat that arrives while the last ones per worker are read comes
// after them; the worker is listed once, with the newer one.
func TestNewestPerSubject(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hb := func(subject string, sec int) heartbeat {
		return heartbeat{subject: subject, at: t0.Add(time.Duration(sec) * time.Second)}
	}
	got := newestPerSubject([]heartbeat{hb("a", 1), hb("b", 2), hb("a", 3), hb("b", 1)})
	if len(got) != 2 || got[0].subject != "a" || !got[0].at.Equal(t0.Add(3*time.Second)) ||
		got[1].subject != "b" || !got[1].at.Equal(t0.Add(2*time.Second)) {
		t.Errorf("newestPerSubject = %+v, want a at 3s then b at 2s", got)
	}
}

// A worker that holds back from the run's prompts, for the tail or for
// the hints, says so; a pause says more than a hold.
func TestWorkerHolding(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                    string
		paused, tail, hint      bool
		wantPaused, wantHolding string
	}{
		{"pulling", false, false, false, "", ""},
		{"the tail", false, true, false, "", HoldingTail},
		{"the hints", false, false, true, "", HoldingHints},
		{"paused and holding", true, true, false, "stopping", ""},
	} {
		hb := heartbeat{at: now}
		hb.Worker, hb.Paused, hb.TailHold, hb.HintHold = "w", c.paused, c.tail, c.hint
		if c.paused {
			hb.PausedReason = "stopping"
		}
		w := workerOf(hb, now, time.Minute)
		if w.Paused != c.wantPaused || w.Holding != c.wantHolding {
			t.Errorf("%s: paused %q, holding %q; want %q, %q", c.name, w.Paused, w.Holding, c.wantPaused, c.wantHolding)
		}
	}
}

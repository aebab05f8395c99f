package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// settledRun is a run 13 s after worker b was killed holding 157
// prompts, with an AckWait of 60 s and an aggregator that expects the
// end in 20 s.
func settledRun() *Run {
	return &Run{
		Run: "r", Total: 1000, Completed: 600, Phase: schema.PhaseSteady,
		ETASec: 20, ETALowSec: 15, ETAHighSec: 30, TokensPerSec: 5000,
		Event:   &Age{AgeSec: 1},
		Queue:   Queue{AckPending: 357},
		ackWait: time.Minute,
		Workers: []Worker{
			{Name: "a", Held: 200, TokensPerSec: 4000, BackInSec: -1, Heartbeat: Age{AgeSec: 1}},
			{Name: "b", Held: 157, TokensPerSec: -1, BackInSec: -1, Heartbeat: Age{AgeSec: 13, Stale: true}},
			{Name: "c", Held: 90, TokensPerSec: -1, BackInSec: -1, Paused: schema.PausedStopping, Heartbeat: Age{AgeSec: 20, Stale: true}},
			{Name: "d", Held: 40, TokensPerSec: -1, BackInSec: -1, Heartbeat: Age{AgeSec: 75, Stale: true}},
		},
	}
}

func TestSettleCountsStrandedPrompts(t *testing.T) {
	st := settledRun()
	if err := settle(t.Context(), reader{}, st, Options{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s := st.Stranded
	if s == nil || s.Prompts != 157 || len(s.Workers) != 1 || s.Workers[0] != "b" || s.BackInSec != 47 || s.AckWaitSec != 60 {
		t.Fatalf("stranded %+v, want 157 held by b (c stopped, d's are back), back in 47 s", s)
	}
	if st.ETASec != 47 || st.ETALowSec != 47 || st.ETAHighSec != 47 {
		t.Errorf("ETA %v (%v-%v), want no sooner than 47 s", st.ETASec, st.ETALowSec, st.ETAHighSec)
	}
	if st.Workers[1].BackInSec != 47 || st.Workers[3].BackInSec != -1 {
		t.Errorf("workers' back_in_sec %v, %v; want 47 and -1", st.Workers[1].BackInSec, st.Workers[3].BackInSec)
	}
	var b bytes.Buffer
	if err := WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"stranded    157 held by b, silent: back in the queue within 47s (AckWait 1m00s)",
		"no sooner than the 157 stranded prompts are back",
		"its 157 prompts back within 47s",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}

	// Without an ETA of the aggregator's, the stranded prompts' return is
	// a lower bound all the same.
	st = settledRun()
	st.ETASec, st.ETALowSec, st.ETAHighSec = -1, -1, -1
	_ = settle(t.Context(), reader{}, st, Options{}, time.Time{})
	b.Reset()
	_ = WriteRun(&b, st)
	if want := "ETA         unknown, at least 47s: the 157 stranded prompts are back then"; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}

	// Past the AckWait, or once the run is done, nothing is stranded.
	for _, change := range []func(*Run){
		func(st *Run) { st.Workers[1].Heartbeat.AgeSec = 61 },
		func(st *Run) { st.Phase = schema.PhaseDone },
		func(st *Run) { st.ackWait = 0 },
	} {
		st := settledRun()
		change(st)
		_ = settle(t.Context(), reader{}, st, Options{}, time.Time{})
		if st.Stranded != nil || st.ETASec != 20 {
			t.Errorf("stranded %+v, ETA %v; want none and 20", st.Stranded, st.ETASec)
		}
	}
	// At most what is delivered and not acknowledged.
	st = settledRun()
	st.Queue.AckPending = 100
	_ = settle(t.Context(), reader{}, st, Options{}, time.Time{})
	if st.Stranded == nil || st.Stranded.Prompts != 100 {
		t.Errorf("stranded %+v, want 100: the consumer has no more unacknowledged", st.Stranded)
	}
}

func TestSettleRatesFromHeartbeatsWhenTheEventHasNone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event *Age
		rate  float64
		want  float64
		from  string
	}{
		{"event with a rate", &Age{AgeSec: 1}, 5000, 5000, "event"},
		{"event without a rate", &Age{AgeSec: 1}, 0, 4000, "heartbeats"},
		{"stale event", &Age{AgeSec: 40, Stale: true}, 5000, 4000, "heartbeats"},
		{"no event", nil, 0, 4000, "heartbeats"},
	} {
		st := settledRun()
		st.Event, st.TokensPerSec = tc.event, tc.rate
		_ = settle(t.Context(), reader{}, st, Options{}, time.Time{})
		if st.TokensPerSec != tc.want || st.TokensPerSecFrom != tc.from {
			t.Errorf("%s: %v tok/s from %s, want %v from %s", tc.name, st.TokensPerSec, st.TokensPerSecFrom, tc.want, tc.from)
		}
	}
}

func TestEventAgeSaysHowOldTheCountsAre(t *testing.T) {
	st := settledRun()
	st.Event = &Age{AgeSec: 3}
	var b bytes.Buffer
	if err := WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"600 / 1,000 (60.0%)  (as of the event 3s ago)", "redelivered 0  (now)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	st.Event.AgeSec = 1
	b.Reset()
	_ = WriteRun(&b, st)
	if strings.Contains(b.String(), "as of the event") || strings.Contains(b.String(), "(now)") {
		t.Errorf("a fresh event needs no age:\n%s", b.String())
	}
}

package report

import (
	"strings"
	"testing"
	"time"
)

func TestWaitingSpans(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	evs := []event{
		{at: at(0), waitingForSlots: true}, {at: at(5), waitingForSlots: true}, {at: at(10)},
		{at: at(15)}, {at: at(600), waitingForSlots: true}, {at: at(660), waitingForSlots: true},
	}
	spans := waitingSpans(evs)
	if len(spans) != 2 || !spans[0].to.Equal(at(10)) || !spans[1].from.Equal(at(600)) || !spans[1].to.Equal(at(660)) {
		t.Fatalf("spans %v", spans)
	}
	got := describeSpans(spans, t0)
	for _, want := range []string{"1m10s in 2 stretches", "0s–10s", "10m0s–11m0s", "it ran the rest of the time"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if got := waitingSpans([]event{{at: at(0)}, {at: at(5)}}); len(got) != 0 {
		t.Errorf("a run that never waited: %v", got)
	}
}

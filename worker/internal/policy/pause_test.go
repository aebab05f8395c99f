package policy

import (
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// A worker pulls a run's prompts while nothing holds it, and says why it
// is paused in one order: stopping, a full store, its backend, the run.
func TestPause(t *testing.T) {
	for _, c := range []struct {
		name string
		h    Holds
		want Pause
	}{
		{"nothing holds it", Holds{}, Pause{Pulls: true}},
		{"the tail hold", Holds{TailHold: true}, Pause{}},
		{"the hint hold", Holds{HintHold: true}, Pause{}},
		{"the run paused", Holds{RunPaused: true, TailHold: true}, Pause{Paused: true, Reason: schema.PausedRun}},
		{"the run gone", Holds{RunGone: true, RunPaused: true}, Pause{Paused: true, Reason: RunGoneReason}},
		{"the backend down", Holds{Breaker: "backend down: 503", RunPaused: true}, Pause{Paused: true, Reason: "backend down: 503"}},
		{"the store full", Holds{StoreFull: true, Breaker: "backend down: 503"}, Pause{Paused: true, Reason: StoreFullReason}},
		{"stopping", Holds{Stopping: true, StoreFull: true}, Pause{Paused: true, Reason: schema.PausedStopping}},
	} {
		if got := c.h.Pause(); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

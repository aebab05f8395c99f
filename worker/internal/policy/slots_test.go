package policy

import (
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

func TestPullSize(t *testing.T) {
	for _, c := range []struct {
		name                                        string
		want, size, taken, turns, held, heldCap, is int
	}{
		{"every free slot", 200, 200, 50, 0, 50, 400, 150},
		{"no more than asked", 10, 200, 50, 0, 50, 400, 10},
		{"a turn waiting goes first", 200, 200, 50, 1, 50, 400, 0},
		{"no more than the held cap leaves room for", 200, 200, 50, 0, 380, 400, 20},
		{"the held cap reached", 200, 200, 50, 0, 400, 400, 0},
		{"after a resize down, none until enough come back", 200, 100, 150, 0, 150, 200, 0},
	} {
		if got := PullSize(c.want, c.size, c.taken, c.turns, c.held, c.heldCap); got != c.is {
			t.Errorf("%s: %d, want %d", c.name, got, c.is)
		}
	}
}

// A peer offers its free slots only while it pulls the run's prompts.
func TestPeerFree(t *testing.T) {
	free := 50
	for _, c := range []struct {
		name string
		hb   schema.Heartbeat
		want int
	}{
		{"pulling", schema.Heartbeat{Window: 50, FreeSlots: &free}, 50},
		{"paused", schema.Heartbeat{Window: 50, FreeSlots: &free, Paused: true}, 0},
		{"holding back for the tail", schema.Heartbeat{Window: 50, FreeSlots: &free, TailHold: true}, 0},
		{"holding back for the hints", schema.Heartbeat{Window: 50, FreeSlots: &free, HintHold: true}, 0},
		{"a worker older than FreeSlots", schema.Heartbeat{Window: 50, InFlightTokens: []int{1, 2, 3}}, 47},
		{"never below 0", schema.Heartbeat{Window: 2, InFlightTokens: []int{1, 2, 3}}, 0},
	} {
		if got := PeerFree(c.hb); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

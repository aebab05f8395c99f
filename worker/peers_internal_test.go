package worker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/schema"
)

// A peer counts its free slots for the tail hand-back only while it
// pulls: a paused peer, or one holding back from the run's prompts near
// its end, would leave a prompt handed back for it in the queue, while
// the request that gave it up had been generating.
func TestPeersFreeSlotsAreThoseOfPeersThatPull(t *testing.T) {
	free := 50
	for _, c := range []struct {
		name string
		hb   schema.Heartbeat
		want int
	}{
		{"pulling", schema.Heartbeat{Worker: "a", Window: 50, FreeSlots: &free}, 50},
		{"paused", schema.Heartbeat{Worker: "a", Window: 50, FreeSlots: &free, Paused: true}, 0},
		{"holding back for the tail", schema.Heartbeat{Worker: "a", Window: 50, FreeSlots: &free, TailHold: true}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p peers
			data, err := json.Marshal(c.hb)
			if err != nil {
				t.Fatal(err)
			}
			p.heard("me")(&nats.Msg{Data: data})
			if got := p.view(time.Now(), time.Minute, func(uint64) bool { return false }).Free; got != c.want {
				t.Errorf("free slots %d, want %d", got, c.want)
			}
		})
	}
}

// A heartbeat's own speed and hints' error reach the peers' readings.
func TestPeersHearSpeedAndHintError(t *testing.T) {
	var p peers
	hb := schema.Heartbeat{Run: "r", Worker: "fast", Window: 8, Speed: 42, HintError: 2.5, HintedAnswers: 300}
	data, _ := json.Marshal(hb)
	p.heard("self")(&nats.Msg{Data: data})
	got := p.view(time.Now(), time.Minute, func(uint64) bool { return false }).Pulling
	if len(got) != 1 || got[0].Speed != 42 || got[0].HintError != 2.5 {
		t.Errorf("peers %+v, want one of speed 42 and hints' error 2.5", got)
	}
}

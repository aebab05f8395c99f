package policy

import (
	"testing"
	"time"
)

func TestAckRoomPolicy(t *testing.T) {
	full := &Consumer{Durable: "workers-r", Pending: 10, AckPending: 4, MaxAckPending: 4}
	room := &Consumer{Durable: "workers-r", Pending: 10, AckPending: 2, MaxAckPending: 4}
	for _, c := range []struct {
		name       string
		s          Snapshot
		streak     int
		wantStreak int
		want       FullChange
		need       int
	}{
		{"full once is not enough", Snapshot{Size: 4, Lanes: []Lane{{Consumer: full}}}, 0, 1, FullKeep, 0},
		{"full twice running is reported", Snapshot{Size: 4, Lanes: []Lane{{Consumer: full, Peers: Peers{Workers: 1, Windows: 4}}}}, 1, 2, FullSet, 16},
		{"the fix is at least twice the limit", Snapshot{Size: 1, Lanes: []Lane{{Consumer: full}}}, 1, 2, FullSet, 8},
		{"reported once", Snapshot{Size: 4, Lanes: []Lane{{Consumer: full, ConsumerFull: true}}}, 2, 3, FullKeep, 0},
		{"room again clears it", Snapshot{Size: 4, Lanes: []Lane{{Consumer: room, ConsumerFull: true}}}, 3, 0, FullClear, 0},
		{"room while not full changes nothing", Snapshot{Size: 4, Lanes: []Lane{{Consumer: room}}}, 1, 0, FullKeep, 0},
		{"nothing waiting is not full", Snapshot{Size: 4, Lanes: []Lane{{Consumer: &Consumer{AckPending: 4, MaxAckPending: 4}}}}, 1, 0, FullKeep, 0},
		{"no limit is never full", Snapshot{Size: 4, Lanes: []Lane{{Consumer: &Consumer{Pending: 9, AckPending: 4}}}}, 1, 0, FullKeep, 0},
		{"a paused worker does not look", Snapshot{Size: 4, Holds: Holds{Breaker: "down"}, Lanes: []Lane{{Consumer: full}}}, 1, 0, FullKeep, 0},
		{"nor one without a free slot", Snapshot{Size: 4, Generating: 4, Lanes: []Lane{{Consumer: full}}}, 1, 0, FullKeep, 0},
		{"nor one holding back for the tail", Snapshot{Size: 4, Lanes: []Lane{{Consumer: full, Holds: Holds{TailHold: true}}}}, 1, 0, FullKeep, 0},
		{"nor one holding back for the hints", Snapshot{Size: 4, Lanes: []Lane{{Consumer: full, Holds: Holds{HintHold: true}}}}, 1, 0, FullKeep, 0},
		{"nor one whose run is paused", Snapshot{Size: 4, Lanes: []Lane{{Consumer: full, Holds: Holds{RunPaused: true}}}}, 1, 0, FullKeep, 0},
		{"nor one that could not read it, and the state stays", Snapshot{Size: 4, Lanes: []Lane{{ConsumerFull: true}}}, 2, 0, FullKeep, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var lp LanePlan
			streak := ackRoomPolicy(c.s, 0, c.streak, &lp)
			if streak != c.wantStreak || lp.Full != c.want || lp.Need != c.need {
				t.Errorf("streak %d, change %d, need %d; want %d, %d, %d", streak, lp.Full, lp.Need, c.wantStreak, c.want, c.need)
			}
		})
	}
}

func TestReads(t *testing.T) {
	c := Config{Window: 8, AckEvery: 10 * time.Second, HandBackAfter: time.Second}
	later := Memory{NextAck: t0.Add(time.Second)}
	due := Memory{NextAck: t0}
	waited := []Flight{{Key: FlightKey{Seq: 1}, Sent: t0.Add(-time.Minute)}}
	slowPeers := Peers{Pulling: []Peer{{Speed: 100}}}
	for _, tc := range []struct {
		name string
		s    Snapshot
		m    Memory
		want LaneReads
	}{
		{"an idle worker alone reads nothing", Snapshot{Now: t0, Size: 8, Lanes: []Lane{{}}}, later, LaneReads{}},
		{"requests that may be handed back", Snapshot{Now: t0, Size: 8, Flights: waited, Lanes: []Lane{{}}}, later, LaneReads{Consumer: true}},
		{"a window shrunk by a hand-back", Snapshot{Now: t0, Size: 6, Lanes: []Lane{{}}}, later, LaneReads{Consumer: true}},
		{"peers pulling and a known pace", Snapshot{Now: t0, Size: 8, Pace: PaceReading{Latency: time.Second}, Lanes: []Lane{{Peers: Peers{Pulling: []Peer{{}}}}}}, later, LaneReads{Consumer: true}},
		{"peers pulling before the first answer", Snapshot{Now: t0, Size: 8, Lanes: []Lane{{Peers: Peers{Pulling: []Peer{{}}}}}}, later, LaneReads{}},
		{"the look for room is due", Snapshot{Now: t0, Size: 8, Lanes: []Lane{{}}}, due, LaneReads{Consumer: true}},
		{"but not for a worker with no free slot", Snapshot{Now: t0, Size: 8, Generating: 8, Lanes: []Lane{{}}}, due, LaneReads{}},
		{"a slow worker reads the consumer and the hints",
			Snapshot{Now: t0, Size: 8, Lanes: []Lane{{Peers: slowPeers}}}, Memory{NextAck: t0.Add(time.Second), Speed: 10}, LaneReads{Consumer: true, Hints: true}},
		{"but not the hints again soon after a reading found none",
			Snapshot{Now: t0, Size: 8, Lanes: []Lane{{Peers: slowPeers}}}, Memory{NextAck: t0.Add(time.Second), Speed: 10, PeekAfter: []time.Time{t0.Add(time.Second)}}, LaneReads{Consumer: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Reads(c, tc.s, tc.m); got[0] != tc.want {
				t.Errorf("Reads = %+v, want %+v", got[0], tc.want)
			}
		})
	}
}

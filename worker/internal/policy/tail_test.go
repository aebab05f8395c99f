package policy

import (
	"slices"
	"testing"
	"time"
)

// waiting returns n waiting requests sent a second apart, the oldest
// first, keyed by their index.
func waiting(n int) []waitingFlight {
	out := make([]waitingFlight, n)
	for i := range out {
		out[i] = waitingFlight{key: FlightKey{Seq: uint64(i)}, sent: t0.Add(time.Duration(i) * time.Second)}
	}
	return out
}

func TestTailPolicy(t *testing.T) {
	fixed := Config{Window: 8, HandBackAfter: time.Second}
	fast := Peer{Rate: 13.2, InFlight: 384}
	three := waiting(3)
	pulling := func(ps ...Peer) Peers { return Peers{Pulling: ps} }
	for _, c := range []struct {
		name    string
		c       Config
		s       Snapshot
		waiting []waitingFlight
		want    tailDecision
		// handed are the indexes in three of the requests handed back.
		handed []int
	}{
		{"nothing to decide without waiting requests or pulling peers",
			fixed, Snapshot{Size: 8, Pace: PaceReading{Latency: time.Second}, Lanes: []Lane{{}}}, nil, tailDecision{}, nil},
		{"no consumer read: no hold",
			fixed, Snapshot{Size: 8, Pace: PaceReading{Latency: 88 * time.Second}, Lanes: []Lane{{Peers: pulling(fast)}}}, nil, tailDecision{}, nil},
		{"holds back near the end for faster peers",
			fixed, Snapshot{Size: 8, Pace: PaceReading{Latency: 88 * time.Second}, Lanes: []Lane{{Peers: pulling(fast), Consumer: &Consumer{Pending: 500}}}}, nil,
			tailDecision{hold: true, pending: 500}, nil},
		{"pulls early in the run",
			fixed, Snapshot{Size: 8, Pace: PaceReading{Latency: 88 * time.Second}, Lanes: []Lane{{Peers: pulling(fast), Consumer: &Consumer{Pending: 3000}}}}, nil,
			tailDecision{pending: 3000}, nil},
		{"hands back the youngest for idle peers",
			fixed, Snapshot{Size: 8, Taken: 3, Lanes: []Lane{{Peers: Peers{Free: 2}, Consumer: &Consumer{}}}}, three,
			tailDecision{retire: 2, idleSlots: 2}, []int{2, 1}},
		{"no more than the waiting requests",
			fixed, Snapshot{Size: 8, Taken: 3, Lanes: []Lane{{Peers: Peers{Free: 10}, Consumer: &Consumer{}}}}, three,
			tailDecision{retire: 3, idleSlots: 10}, []int{2, 1, 0}},
		{"retires but hands back nothing while a pull is open",
			fixed, Snapshot{Size: 8, Taken: 3, Pulling: true, Lanes: []Lane{{Peers: Peers{Free: 2}, Consumer: &Consumer{}}}}, three,
			tailDecision{retire: 2, idleSlots: 2}, nil},
		{"no idle peer, no hand-back",
			fixed, Snapshot{Size: 8, Taken: 3, Lanes: []Lane{{Consumer: &Consumer{}}}}, three,
			tailDecision{}, nil},
		{"prompts left to deliver: no hand-back",
			fixed, Snapshot{Size: 8, Taken: 3, Lanes: []Lane{{Peers: Peers{Free: 2}, Consumer: &Consumer{Pending: 4}}}}, three,
			tailDecision{pending: 4}, nil},
		{"a shrunk fixed window comes back when prompts come again",
			fixed, Snapshot{Size: 5, Lanes: []Lane{{Consumer: &Consumer{Pending: 4}}}}, nil,
			tailDecision{pending: 4, restore: true}, nil},
		{"an automatic window is never restored",
			Config{Auto: true, Window: 8}, Snapshot{Size: 5, Lanes: []Lane{{Consumer: &Consumer{Pending: 4}}}}, nil,
			tailDecision{}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := tailPolicy(c.c, c.s, 0, c.waiting)
			var handed []int
			for _, k := range got.handBack {
				handed = append(handed, slices.IndexFunc(three, func(w waitingFlight) bool { return w.key == k }))
			}
			if got.hold != c.want.hold || got.pending != c.want.pending || got.restore != c.want.restore ||
				got.retire != c.want.retire || got.idleSlots != c.want.idleSlots || !slices.Equal(handed, c.handed) {
				t.Errorf("got %+v handing back %v, want %+v handing back %v", got, handed, c.want, c.handed)
			}
		})
	}
}

// The requests that may be handed back have waited the hand-back wait
// without a first token, and are not last deliveries; none are when
// requests are never handed back.
func TestWaitingFlights(t *testing.T) {
	c := Config{HandBackAfter: 5 * time.Second}
	now := t0.Add(time.Minute)
	fl := func(seq uint64, state FlightState, ago time.Duration, last bool) Flight {
		f := Flight{Key: FlightKey{Seq: seq}, State: state, Last: last}
		if ago >= 0 {
			f.Sent = now.Add(-ago)
		}
		return f
	}
	s := Snapshot{Now: now, Pace: PaceReading{LeastTTFT: 2 * time.Second}, Lanes: []Lane{{}}, Flights: []Flight{
		fl(1, FlightWaiting, 10*time.Second, false), // waited past 3 x 2 s
		fl(2, FlightWaiting, 5*time.Second, false),  // under 6 s
		fl(3, FlightStreaming, 10*time.Second, false),
		fl(4, FlightWaiting, 10*time.Second, true), // a last delivery
		fl(5, FlightWaiting, -1, false),            // not sent
	}}
	got := waitingFlights(c, s)
	if len(got[0]) != 1 || got[0][0].key.Seq != 1 {
		t.Errorf("waiting %+v, want request 1 alone", got[0])
	}
	if got := waitingFlights(Config{HandBackAfter: -1}, s); len(got[0]) != 0 {
		t.Errorf("never handing back: %+v waiting", got[0])
	}
}

func TestHoldForTail(t *testing.T) {
	// The fast server of the makespan benchmark: 384 prompts held, 13.2
	// completed a second, about 29 s each.
	fast := Peer{Rate: 13.2, InFlight: 384}
	for _, c := range []struct {
		name    string
		pending int64
		own     time.Duration
		peers   []Peer
		want    bool
	}{
		{"early in the run the slow worker pulls", 3000, 88 * time.Second, []Peer{fast}, false},
		{"near the end it holds back", 500, 88 * time.Second, []Peer{fast}, true},
		{"the fast worker never holds back for the slow one", 10, 29 * time.Second, []Peer{{Rate: 1.1, InFlight: 96}}, false},
		{"nothing left to pull", 0, 88 * time.Second, []Peer{fast}, false},
		{"alone it always pulls", 1, time.Hour, nil, false},
		{"before its first answer it pulls", 1, 0, []Peer{fast}, false},
		{"peers completing nothing do not count", 1, time.Hour, []Peer{{Rate: 0, InFlight: 10}}, false},
		{"peers with free slots take what is left at once", 100, 30 * time.Second, []Peer{{Rate: 13.2, InFlight: 100, Free: 284}}, true},
		{"equal workers never hold back", 5, 29 * time.Second, []Peer{fast}, false},
		{"rates add up", 1000, 88 * time.Second, []Peer{fast, fast}, true},
	} {
		if got := holdForTail(c.pending, c.own, c.peers); got != c.want {
			t.Errorf("%s: holdForTail(%d, %v, %v) = %v, want %v", c.name, c.pending, c.own, c.peers, got, c.want)
		}
	}
}

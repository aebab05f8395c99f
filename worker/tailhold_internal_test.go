package worker

import (
	"testing"
	"time"
)

func TestHoldForTail(t *testing.T) {
	// The fast server of the makespan benchmark: 384 prompts held, 13.2
	// completed a second, about 29 s each.
	fast := tailPeer{rate: 13.2, inFlight: 384}
	for _, c := range []struct {
		name    string
		pending int64
		own     time.Duration
		peers   []tailPeer
		want    bool
	}{
		{"early in the run the slow worker pulls", 3000, 88 * time.Second, []tailPeer{fast}, false},
		{"near the end it holds back", 500, 88 * time.Second, []tailPeer{fast}, true},
		{"the fast worker never holds back for the slow one", 10, 29 * time.Second, []tailPeer{{rate: 1.1, inFlight: 96}}, false},
		{"nothing left to pull", 0, 88 * time.Second, []tailPeer{fast}, false},
		{"alone it always pulls", 1, time.Hour, nil, false},
		{"before its first answer it pulls", 1, 0, []tailPeer{fast}, false},
		{"peers completing nothing do not count", 1, time.Hour, []tailPeer{{rate: 0, inFlight: 10}}, false},
		{"peers with free slots take what is left at once", 100, 30 * time.Second, []tailPeer{{rate: 13.2, inFlight: 100, free: 284}}, true},
		{"equal workers never hold back", 5, 29 * time.Second, []tailPeer{fast}, false},
		{"rates add up", 1000, 88 * time.Second, []tailPeer{fast, fast}, true},
	} {
		if got := holdForTail(c.pending, c.own, c.peers); got != c.want {
			t.Errorf("%s: holdForTail(%d, %v, %v) = %v, want %v", c.name, c.pending, c.own, c.peers, got, c.want)
		}
	}
}

func TestNextRate(t *testing.T) {
	if r := nextRate(0, 100, 110, time.Second); r != 10 {
		t.Errorf("first rate %v, want 10", r)
	}
	if r := nextRate(10, 110, 130, time.Second); r <= 10 || r >= 20 {
		t.Errorf("rate %v, want between 10 and 20", r)
	}
	if r := nextRate(10, 110, 100, time.Second); r != 10 {
		t.Errorf("a counter going back changed the rate to %v", r)
	}
	if r := nextRate(10, 110, 120, 0); r != 10 {
		t.Errorf("no time between heartbeats changed the rate to %v", r)
	}
}

func TestLatencyMean(t *testing.T) {
	var l latencyMean
	if l.get() != 0 {
		t.Fatal("the zero value has a mean")
	}
	l.add(10 * time.Second)
	if l.get() != 10*time.Second {
		t.Fatalf("mean %v after one 10 s request", l.get())
	}
	for range 200 {
		l.add(20 * time.Second)
	}
	if m := l.get(); m < 19*time.Second || m > 20*time.Second {
		t.Errorf("mean %v after many 20 s requests", m)
	}
}

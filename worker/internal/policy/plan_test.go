package policy

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	c := Config{Window: 8, HandBackAfter: time.Second, AckEvery: 10 * time.Second}
	full := &Consumer{Pending: 10, AckPending: 4, MaxAckPending: 4}
	t.Run("looks for room only when due, and remembers the streak", func(t *testing.T) {
		m := Memory{NextAck: t0.Add(time.Second)}
		s := Snapshot{Now: t0, Size: 8, Lanes: []Lane{{Consumer: full}}}
		pl, m := Decide(c, s, m)
		if pl.Lanes[0].Full != FullKeep || m.FullStreak[0] != 0 || !m.NextAck.Equal(t0.Add(time.Second)) {
			t.Fatalf("not due: change %d, streak %v, next %v", pl.Lanes[0].Full, m.FullStreak, m.NextAck)
		}
		for i, want := range []FullChange{FullKeep, FullSet} {
			s.Now = m.NextAck
			pl, m = Decide(c, s, m)
			if pl.Lanes[0].Full != want || m.FullStreak[0] != i+1 || !m.NextAck.Equal(s.Now.Add(c.AckEvery)) {
				t.Fatalf("look %d: change %d, streak %v, next %v", i+1, pl.Lanes[0].Full, m.FullStreak, m.NextAck)
			}
		}
	})
	t.Run("hand-backs of several runs retire together", func(t *testing.T) {
		old := t0.Add(-time.Minute)
		lane := Lane{Peers: Peers{Free: 1}, Consumer: &Consumer{}}
		s := Snapshot{Now: t0, Size: 8, Taken: 4, Lanes: []Lane{lane, lane}, Flights: []Flight{
			{Key: FlightKey{Seq: 1}, Lane: 0, Sent: old}, {Key: FlightKey{Seq: 2}, Lane: 0, Sent: old},
			{Key: FlightKey{Seq: 3}, Lane: 1, Sent: old}, {Key: FlightKey{Seq: 4}, Lane: 1, Sent: old},
		}}
		pl, _ := Decide(c, s, Memory{NextAck: t0.Add(time.Hour)})
		if pl.Retire != 2 || len(pl.Lanes[0].HandBack) != 1 || len(pl.Lanes[1].HandBack) != 1 || pl.Lanes[1].HandBack[0].Seq < 3 {
			t.Fatalf("retire %d, hand-backs %v and %v; want 2, one of each run's", pl.Retire, pl.Lanes[0].HandBack, pl.Lanes[1].HandBack)
		}
	})
	t.Run("the fixed window comes back when prompts come again", func(t *testing.T) {
		s := Snapshot{Now: t0, Size: 5, Lanes: []Lane{{Consumer: &Consumer{Pending: 3}}}}
		pl, _ := Decide(c, s, Memory{NextAck: t0.Add(time.Hour)})
		if pl.Window.Size != 8 || pl.Window.Why != "prompts came again" {
			t.Fatalf("window %+v, want 8", pl.Window)
		}
	})
	t.Run("the automatic window's size is the rule's", func(t *testing.T) {
		auto := c
		auto.Auto, auto.MaxWindow = true, 500
		s := Snapshot{Now: t0, Size: 8, Generating: 8, Load: LoadReading{Load: &Load{Running: 8}}, Lanes: []Lane{{}}}
		pl, m := Decide(auto, s, Memory{NextAck: t0.Add(time.Hour)})
		if pl.Window.Size != 12 || m.Rule.Prev == nil || !m.Load.Read {
			t.Fatalf("window %+v, memory %+v; want 12 and the reading remembered", pl.Window, m)
		}
	})
	t.Run("a reading of hints that found none waits before the next", func(t *testing.T) {
		s := Snapshot{Now: t0, Size: 8, Lanes: []Lane{{NextHint: 0}, {NextHint: -1}}}
		_, m := Decide(Config{Window: 8, PeekEvery: 30 * time.Second}, s, Memory{NextAck: t0.Add(time.Hour)})
		if !m.PeekAfter[0].Equal(t0.Add(30*time.Second)) || !m.PeekAfter[1].IsZero() {
			t.Fatalf("peek after %v, want 30 s for the run read and nothing for the other", m.PeekAfter)
		}
	})
	t.Run("a request two workers list is hedged once", func(t *testing.T) {
		f := PeerFlight{Speed: 10, Age: time.Second}
		f.Seq, f.ID, f.Tokens, f.ElapsedMillis = 7, "p", 100, 60_000
		g := f
		g.Worker = "other"
		s := Snapshot{Now: t0, Size: 8, Lanes: []Lane{{Consumer: &Consumer{}, Peers: Peers{Hedgeable: []PeerFlight{f, g}}}},
			Flights: []Flight{{Key: FlightKey{Seq: 1}, State: FlightStreaming, Tokens: 500, Sent: t0.Add(-time.Second)}}}
		pl, _ := Decide(Config{Window: 8, Hedge: true}, s, Memory{NextAck: t0.Add(time.Hour)})
		if len(pl.Lanes[0].Hedges) != 1 {
			t.Fatalf("hedges %v, want the request once", pl.Lanes[0].Hedges)
		}
	})
}

// Decide leaves the memory it was given as it was: a decision can be
// made again from the same inputs.
func TestDecideLeavesItsMemoryAlone(t *testing.T) {
	c := Config{Window: 8, AckEvery: time.Second, PeekEvery: time.Second, Yield: true}
	s := Snapshot{Now: t0, Size: 8, Load: LoadReading{Load: &Load{Running: 8, TTFT: []Bucket{{LE: 1, Count: 1}}}},
		Lanes: []Lane{{Consumer: &Consumer{Pending: 10, AckPending: 4, MaxAckPending: 4}, NextHint: 0}}}
	in := Memory{FullStreak: make([]int, 1, 4), PeekAfter: make([]time.Time, 1, 4),
		Yield: YieldMemory{History: make([]TTFTReading, 1, 4)}}
	keep := Memory{FullStreak: slices.Clone(in.FullStreak), PeekAfter: slices.Clone(in.PeekAfter),
		Yield: YieldMemory{History: slices.Clone(in.Yield.History)}}
	p1, m1 := Decide(c, s, in)
	if !reflect.DeepEqual(in.FullStreak[:cap(in.FullStreak)][:1], keep.FullStreak) || !reflect.DeepEqual(in.PeekAfter, keep.PeekAfter) ||
		!reflect.DeepEqual(in.Yield.History[:cap(in.Yield.History)][:1], keep.Yield.History) || in.FullStreak[:2][1] != 0 {
		t.Fatalf("Decide changed the memory it was given: %+v", in)
	}
	p2, m2 := Decide(c, s, in)
	if !reflect.DeepEqual(p1, p2) || !reflect.DeepEqual(m1, m2) {
		t.Fatalf("the same inputs made two decisions:\n%+v %+v\n%+v %+v", p1, m1, p2, m2)
	}
}

// The policy is pure: it takes its time from the snapshot, holds no lock
// and talks to no server. Its files import neither NATS nor sync, nor
// read the clock.
func TestPolicyIsPure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "sync" || strings.HasPrefix(path, "sync/") || strings.Contains(path, "nats") {
				t.Errorf("%s imports %s", name, path)
			}
		}
		for _, clock := range []string{"time.Now(", "time.Since(", "time.Until(", "time.Sleep(", "time.After(", "time.NewTimer(", "time.NewTicker(", "rand."} {
			if strings.Contains(string(src), clock) {
				t.Errorf("%s calls %s", name, clock)
			}
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d files checked", checked)
	}
}

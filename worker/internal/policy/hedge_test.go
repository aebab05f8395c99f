package policy

import (
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

func TestExpectLength(t *testing.T) {
	var lengths []int
	for i := 1; i <= 100; i++ {
		lengths = append(lengths, 10*i) // 10 .. 1000
	}
	typical, long := expectLength(500, 0, lengths)
	if typical != 760 || long != 970 {
		t.Errorf("500 tokens done of answers 10..1000: typical %v, long %v; want the median 760 and the 95th percentile 970 of those above", typical, long)
	}
	if typical, long := expectLength(995, 0, lengths); typical != 1990 || long != 3980 {
		t.Errorf("past every answer seen: %v, %v; want twice and four times what is done", typical, long)
	}
	if typical, long := expectLength(100, 5000, lengths); typical != 5000 || long != 5000 {
		t.Errorf("with a hint of 5000: %v, %v; want the hint", typical, long)
	}
	if typical, _ := expectLength(0, 0, nil); typical != 1 {
		t.Errorf("nothing known: %v, want a token", typical)
	}
}

// hedgeSnapshot is the snapshot of a worker of 100 slots, 20 of them
// generating, whose run has nothing left to deliver, with fs listed by
// its other workers.
func hedgeSnapshot(fs ...PeerFlight) Snapshot {
	var lengths []int
	for i := 1; i <= 100; i++ {
		lengths = append(lengths, 10*i)
	}
	return Snapshot{Size: 100, Generating: 20, Lanes: []Lane{{
		Consumer: &Consumer{Pending: 0},
		Peers:    Peers{Hedgeable: fs}, Lengths: lengths,
	}}}
}

func slowFlight(id string, tokens int, ran time.Duration) PeerFlight {
	return PeerFlight{Flight: schema.Flight{ID: id, Tokens: tokens, ElapsedMillis: ran.Milliseconds()}, Worker: "slow", Speed: 10}
}

func TestHedgePolicy(t *testing.T) {
	on := Config{Hedge: true}
	const own = 50 // tokens a second per request, five times the slow worker's 10
	ids := func(fs []PeerFlight) (out []string) {
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	// early: 100 tokens in 12 s; the answers above 100 take 560 typically
	// (11.2 s here) and 950 when long (19 s here, 85 s there).
	early := slowFlight("early", 100, 12*time.Second)
	// late: 900 of about 960, or 990 when long; a copy here would take
	// longer (19.8 s) than the rest there (9 s).
	late := slowFlight("late", 900, 90*time.Second)
	// young: 100 tokens, but sent 5 s ago: not yet as long as a copy here
	// would typically take.
	young := slowFlight("young", 100, 5*time.Second)
	// waiting: no token yet, for the tail hand-back.
	waiting := slowFlight("waiting", 0, 20*time.Second)
	got := ids(HedgePolicy(on, hedgeSnapshot(early, late, young, waiting), 0, own, 0))
	if len(got) != 1 || got[0] != "early" {
		t.Errorf("hedged %v, want [early]", got)
	}

	more := slowFlight("more", 20, 12*time.Second) // more to gain than early: 72 s against 66
	if got := ids(HedgePolicy(on, hedgeSnapshot(early, more), 0, own, 0)); len(got) != 2 || got[0] != "more" {
		t.Errorf("hedged %v, want [more early]: the most to gain first", got)
	}
	if got := HedgePolicy(on, hedgeSnapshot(early, more), 0, own, 1); len(got) != 2 {
		t.Errorf("no hedge limit: hedged %d, want 2", len(got))
	}
	limited := Config{Hedge: true, HedgeMax: 2}
	if got := HedgePolicy(limited, hedgeSnapshot(early, more), 0, own, 1); len(got) != 1 {
		t.Errorf("--hedge-max 2 with one running: hedged %d, want 1", len(got))
	}
	busy := hedgeSnapshot(early, more)
	busy.Generating = 99
	if got := HedgePolicy(on, busy, 0, own, 0); len(got) != 1 {
		t.Errorf("one slot not generating: hedged %d, want 1", len(got))
	}

	for name, r := range map[string]Snapshot{
		"prompts left to deliver": func() Snapshot { r := hedgeSnapshot(early); r.Lanes[0].Consumer.Pending = 1; return r }(),
		"consumer not read":       func() Snapshot { r := hedgeSnapshot(early); r.Lanes[0].Consumer = nil; return r }(),
		"already hedged":          func() Snapshot { f := early; f.Hedged = true; return hedgeSnapshot(f) }(),
		"peer not much slower":    func() Snapshot { f := early; f.Speed = 40; return hedgeSnapshot(f) }(),
		"no free slot":            func() Snapshot { r := hedgeSnapshot(early); r.Generating = 100; return r }(),
	} {
		if got := HedgePolicy(on, r, 0, own, 0); len(got) != 0 {
			t.Errorf("%s: hedged %v, want none", name, ids(got))
		}
	}
	if got := HedgePolicy(Config{}, hedgeSnapshot(early), 0, own, 0); len(got) != 0 {
		t.Error("--hedge off: hedged")
	}
	if got := HedgePolicy(on, hedgeSnapshot(early), 0, 0, 0); len(got) != 0 {
		t.Error("own speed unknown: hedged")
	}
}

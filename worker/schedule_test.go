package worker

import (
	"slices"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// always lets every run be pulled from.
func always(*lane) bool { return true }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A run found empty is looked at again after a back-off that doubles to
// emptyBackoffMax, and to emptyBackoffIdle once empty for a minute; one
// that delivers again starts level with the runs that kept delivering.
func TestSchedulerBackoffAndRejoin(t *testing.T) {
	var s scheduler
	a, b := &lane{run: "a"}, &lane{run: "b"}
	lanes := []*lane{a, b}
	now := t0
	if ls, _, _ := s.candidates(lanes, now, always, nil); len(ls) != 2 {
		t.Fatalf("%d candidates at start, want 2", len(ls))
	}
	var waits []time.Duration
	for range 6 {
		s.pulled(b, 4, 0, now)
		ls, _, _ := s.candidates(lanes, now, always, nil)
		if len(ls) != 1 || ls[0] != a {
			t.Fatalf("candidates while b backs off: %v", ls)
		}
		next := s.lanes[b].recheck
		waits = append(waits, next.Sub(now))
		if _, _, due := s.candidates([]*lane{b}, now, always, nil); !due.Equal(next) {
			t.Fatalf("with b alone, the next look is at %v, want %v", due, next)
		}
		now = next
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second}
	if !slices.Equal(waits, want) {
		t.Errorf("back-offs %v, want %v", waits, want)
	}
	// b stays empty for a minute: looked at every 30 s at most then.
	s.pulled(b, 4, 0, t0.Add(emptyLongAfter))
	s.pulled(b, 4, 0, t0.Add(emptyLongAfter+time.Second))
	if st := s.lanes[b]; st.backoff <= emptyBackoffMax || st.backoff > emptyBackoffIdle {
		t.Errorf("back-off after a minute empty: %v", st.backoff)
	}
	// a is served 1,000 tokens meanwhile; b rejoins level with it.
	a.n.tokens.Add(1000)
	s.candidates(lanes, now, always, nil)
	s.pulled(a, 4, 4, now)
	s.pulled(b, 4, 2, now.Add(time.Hour))
	_, cs, _ := s.candidates(lanes, now.Add(time.Hour), always, nil)
	if len(cs) != 2 || cs[0].VTime != 1000 || cs[1].VTime != 1000 {
		t.Errorf("virtual times after b rejoins: %+v, want both 1000", cs)
	}
}

// Virtual time counts tokens over the weight in force when they were
// served: changing a weight does not rewrite the past.
func TestVirtualTimeFollowsWeightChanges(t *testing.T) {
	var s scheduler
	a := &lane{run: "a"}
	a.n.tokens.Add(300)
	s.candidates([]*lane{a}, t0, always, nil)
	a.sched.Store(&schema.Schedule{Weight: 3})
	a.n.tokens.Add(300)
	_, cs, _ := s.candidates([]*lane{a}, t0, always, nil)
	if cs[0].VTime != 400 || cs[0].Weight != 3 {
		t.Errorf("vtime %v weight %v, want 300/1 + 300/3 = 400 and 3", cs[0].VTime, cs[0].Weight)
	}
}

// A run is charged at once, for each prompt whose generation is not
// over, its mean answer less what the prompt has streamed.
func TestCommittedTokens(t *testing.T) {
	l := &lane{run: "a"}
	l.n.tokens.Add(100)
	if got := committed(l, func(int) int64 { return 0 }); got != 100 {
		t.Errorf("before any answer: %d, want the 100 streamed", got)
	}
	l.answers.add(50)
	l.n.active.Add(2)
	if got := committed(l, func(int) int64 { return 30 }); got != 170 {
		t.Errorf("two prompts under way, 30 streamed of a mean of 50: %d, want 100 + 2x50 - 30 = 170", got)
	}
	if got := committed(l, func(int) int64 { return 500 }); got != 100 {
		t.Errorf("prompts past the mean: %d, want the 100 streamed (the estimate is never negative)", got)
	}
	if got := committed(l, nil); got != 100 {
		t.Errorf("without the streamed count: %d, want 100", got)
	}
}

package worker

import (
	"sync"
	"time"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// A worker that serves several runs shares its free slots between them
// (see policy.GrantSlots): the runs of the highest priority with prompts waiting
// take every slot as slots free up; among runs of equal priority the
// slots go in proportion to their weights, counted in the completion
// tokens each run has been served (its virtual time: tokens over
// weight); a run with nothing to deliver gives its slots to the next at
// once (backfill). No running request is ever cut for it.
//
// A slot given to a run yields its tokens over the next minute or more,
// while slots keep freeing: counted only as they stream, a run behind
// would take every slot that frees until its tokens caught up, then
// none, and the shares would swing around their targets by the length
// of an answer. So a run is charged at once, for each of its prompts
// whose generation is not over, its answers' mean length less what the
// prompt has streamed (committed tokens); a prompt that ends shorter or
// longer than the mean corrects it.
//
// A worker learns that a run has nothing to deliver when a pull finds
// nothing. With several runs it pulls without waiting, so that an empty
// run never holds up the others, and looks at an empty run again after a
// back-off (emptyBackoff), so that idle runs cost little; with one run
// left to look at, it waits on it as a single-run worker does.

// Back-off of a run found empty: looked at again after emptyBackoffMin,
// doubling to emptyBackoffMax; after emptyLongAfter empty, up to
// emptyBackoffIdle. A prompt handed back at the end of a run for this
// worker waits at most emptyBackoffMax.
const (
	emptyBackoffMin  = 100 * time.Millisecond
	emptyBackoffMax  = 2 * time.Second
	emptyLongAfter   = time.Minute
	emptyBackoffIdle = 30 * time.Second
)

// scheduler keeps what sharing slots between runs remembers: each run's
// virtual time and when it was found empty. The zero value is ready.
type scheduler struct {
	mu    sync.Mutex
	lanes map[*lane]*laneSched
}

type laneSched struct {
	vtime float64
	// seen is the run's tokens counted into vtime so far.
	seen int64
	// emptySince is when pulls began to find the run empty (zero while
	// it delivers); recheck is when it is next looked at, after backoff.
	emptySince, recheck time.Time
	backoff             time.Duration
}

// candidates returns the lanes that may be pulled from at now, with
// what policy.GrantSlots needs to know of them, and, when there are
// none, the earliest time one that is empty is looked at again (zero if
// none is). The runs pulls says no to (paused, gone, held back) and runs
// found empty and not yet due are left out. streamed gives, for a lane's
// index, the tokens its requests in flight have streamed so far (nil:
// none are counted).
func (s *scheduler) candidates(lanes []*lane, now time.Time, pulls func(*lane) bool, streamed func(int) int64) ([]*lane, []policy.Candidate, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ls []*lane
	var cs []policy.Candidate
	var next time.Time
	for _, l := range lanes {
		st := s.state(l)
		sc := l.schedule()
		tokens := committed(l, streamed)
		st.vtime += float64(tokens-st.seen) / sc.Share()
		st.seen = tokens
		if !pulls(l) {
			continue
		}
		if !st.recheck.IsZero() && now.Before(st.recheck) {
			if next.IsZero() || st.recheck.Before(next) {
				next = st.recheck
			}
			continue
		}
		ls = append(ls, l)
		cs = append(cs, policy.Candidate{Priority: sc.Priority, Weight: sc.Share(), VTime: st.vtime})
	}
	if len(ls) > 0 {
		next = time.Time{}
	}
	return ls, cs, next
}

// committed is l's tokens served and committed: those streamed, and for
// each prompt whose generation is not over the mean answer less what its
// requests have streamed, in all at least 0.
func committed(l *lane, streamed func(int) int64) int64 {
	tokens := l.n.tokens.Load()
	if streamed == nil {
		return tokens
	}
	due := float64(l.n.active.Load())*l.answers.meanTokens() - float64(streamed(l.index))
	return tokens + int64(max(due, 0))
}

// state is l's state, made when l is new; s.mu must be held.
func (s *scheduler) state(l *lane) *laneSched {
	if s.lanes == nil {
		s.lanes = map[*lane]*laneSched{}
	}
	st := s.lanes[l]
	if st == nil {
		st = &laneSched{}
		s.lanes[l] = st
		// A run that joins starts level with those running, not behind
		// them by everything they were served before it came.
		st.vtime = s.leastActive(l)
	}
	return st
}

// leastActive is the least virtual time of the runs other than l that
// deliver; 0 when none does.
func (s *scheduler) leastActive(l *lane) float64 {
	least, any := 0.0, false
	for o, st := range s.lanes {
		if o == l || !st.emptySince.IsZero() {
			continue
		}
		if !any || st.vtime < least {
			least, any = st.vtime, true
		}
	}
	return least
}

// pulled records what a pull from l found at now: got messages of the
// asked. A run found empty is looked at again after its back-off; one
// that delivers again after being empty starts level with the runs
// running, so that its idle time does not buy it the fleet.
func (s *scheduler) pulled(l *lane, asked, got int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(l)
	if got > 0 {
		if !st.emptySince.IsZero() {
			st.vtime = max(st.vtime, s.leastActive(l))
		}
		st.emptySince, st.recheck, st.backoff = time.Time{}, time.Time{}, 0
		return
	}
	if asked == 0 {
		return
	}
	if st.emptySince.IsZero() {
		st.emptySince = now
	}
	limit := emptyBackoffMax
	if now.Sub(st.emptySince) >= emptyLongAfter {
		limit = emptyBackoffIdle
	}
	st.backoff = min(max(2*st.backoff, emptyBackoffMin), limit)
	st.recheck = now.Add(st.backoff)
}

// idleFor is how long pulls have found l's run empty; 0 while it
// delivers.
func (s *scheduler) idleFor(l *lane, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.lanes[l]; st != nil && !st.emptySince.IsZero() {
		return now.Sub(st.emptySince)
	}
	return 0
}

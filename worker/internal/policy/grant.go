package policy

import (
	"math"
	"slices"
)

// A worker that serves several runs shares its free slots between them:
// the runs of the highest priority with prompts waiting take every slot
// as slots free up; among runs of equal priority the slots go in
// proportion to their weights, counted in the completion tokens each run
// has been served (its virtual time: tokens over weight); a run with
// nothing to deliver gives its slots to the next at once (backfill). No
// running request is ever cut for it.

// Candidate is what GrantSlots knows of a run that may be pulled from.
type Candidate struct {
	Priority int
	Weight   float64
	// VTime is the run's tokens served over its weight, from when it
	// last became active.
	VTime float64
}

// Grant is N slots for candidate I.
type Grant struct {
	I, N int
}

// GrantSlots shares n free slots between the candidates: the highest
// priority ones get them all, in proportion to their weights, the runs
// furthest behind (least virtual time) first and taking the rounding; the
// lower priority ones follow with none, in the order they are tried when
// the ones before them have nothing to deliver (their slots then pass
// on). Every candidate appears once, highest priority first, then least
// virtual time.
func GrantSlots(n int, cs []Candidate) []Grant {
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if cs[a].Priority != cs[b].Priority {
			return cs[b].Priority - cs[a].Priority
		}
		switch {
		case cs[a].VTime < cs[b].VTime:
			return -1
		case cs[a].VTime > cs[b].VTime:
			return 1
		}
		return 0
	})
	out := make([]Grant, len(order))
	if len(order) == 0 {
		return out
	}
	top := cs[order[0]].Priority
	var sum float64
	k := 0
	for _, i := range order {
		if cs[i].Priority != top {
			break
		}
		sum += cs[i].Weight
		k++
	}
	given := 0
	for j, i := range order {
		out[j] = Grant{I: i}
		if j < k {
			out[j].N = int(math.Floor(float64(n) * cs[i].Weight / sum))
			given += out[j].N
		}
	}
	for j := 0; given < n; j = (j + 1) % k {
		out[j].N++
		given++
	}
	return out
}

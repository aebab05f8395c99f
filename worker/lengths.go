package worker

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sync"
)

// sampleSize bounds a sample: enough for the median of the tail above
// any length that matters to a hedge, and for the 99th percentile of the
// hints' error.
const sampleSize = 4096

// sample keeps a uniform sample of a run's values, at most sampleSize of
// them (reservoir sampling): its answer lengths in completion tokens, from
// which hedge.go expects a request's length, and its answers' lengths over
// their hints, from which hintlimit.go learns how far hints err. The zero
// value is empty.
type sample[T cmp.Ordered] struct {
	mu   sync.Mutex
	seen int
	v    []T
}

// add counts one value.
func (s *sample[T]) add(x T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	if len(s.v) < sampleSize {
		s.v = append(s.v, x)
		return
	}
	if i := rand.IntN(s.seen); i < sampleSize {
		s.v[i] = x
	}
}

// sorted returns the sample, sorted, and how many values were counted.
func (s *sample[T]) sorted() ([]T, int) {
	s.mu.Lock()
	v, seen := slices.Clone(s.v), s.seen
	s.mu.Unlock()
	slices.Sort(v)
	return v, seen
}

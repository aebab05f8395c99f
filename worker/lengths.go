package worker

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
)

// answerLengths are a run's answer lengths in completion tokens, counted
// once each: their moving mean, which the scheduler charges a run for
// each prompt it starts (schedule.go), and a uniform sample of them, from
// which a hedge expects a request's length. The zero value has seen none.
type answerLengths struct {
	// mean is the moving mean (float64 bits; 0 before the first).
	mean   atomic.Uint64
	sample sample[int]
}

// meanTokensWeight is each answer's weight in the moving mean: about the
// last hundred count.
const meanTokensWeight = 1.0 / 100

// add counts an answer of n completion tokens.
func (a *answerLengths) add(n int) {
	for {
		old := a.mean.Load()
		m := math.Float64frombits(old)
		next := float64(n)
		if m > 0 {
			next = m + meanTokensWeight*(float64(n)-m)
		}
		if a.mean.CompareAndSwap(old, math.Float64bits(next)) {
			break
		}
	}
	a.sample.add(n)
}

// meanTokens is the moving mean of the run's answers, 0 before the first.
func (a *answerLengths) meanTokens() float64 { return math.Float64frombits(a.mean.Load()) }

// sampleSize bounds a sample: enough for the median of the tail above
// any length that matters to a hedge, and for the 99th percentile of the
// hints' error.
const sampleSize = 4096

// sample keeps a uniform sample of a run's values, at most sampleSize of
// them (reservoir sampling): its answer lengths, and its answers' lengths
// over their hints, from which the hints' error is known. The zero value
// is empty.
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

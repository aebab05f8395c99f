package worker

import (
	"math/rand/v2"
	"slices"
	"sync"
)

// lengthSampleSize bounds a lengthSample: enough for the median of the
// tail above any length that matters to a hedge.
const lengthSampleSize = 4096

// lengthSample keeps a uniform sample of a run's answer lengths, in
// completion tokens, at most lengthSampleSize of them (reservoir
// sampling): hedge.go expects a request's length from it. The zero
// value is empty.
type lengthSample struct {
	mu   sync.Mutex
	seen int
	v    []int
}

// add counts an answer of n tokens.
func (s *lengthSample) add(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	if len(s.v) < lengthSampleSize {
		s.v = append(s.v, n)
		return
	}
	if i := rand.IntN(s.seen); i < lengthSampleSize {
		s.v[i] = n
	}
}

// sorted returns the sample, sorted.
func (s *lengthSample) sorted() []int {
	s.mu.Lock()
	v := slices.Clone(s.v)
	s.mu.Unlock()
	slices.Sort(v)
	return v
}

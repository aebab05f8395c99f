package throughput

import (
	"math"
	"math/bits"
)

// maxLength bounds every token count the estimator stores (2^40, far
// beyond any context window), so that sums cannot overflow.
const maxLength = 1 << 40

// subBuckets is the number of histogram buckets per power of two. Lengths
// below 2*subBuckets get a bucket each; above that a bucket spans at most
// 1/subBuckets of its lower edge (about 1.6%), finer than the noise of any
// length estimate, and lengths up to 2^40 tokens need 2,241 buckets
// however many answers there are.
const subBuckets = 64

// clampLength turns any token count into one the estimator can store.
func clampLength(n int64) int64 {
	if n < 0 {
		return 0
	}
	if n > maxLength {
		return maxLength
	}
	return n
}

// bucketOf returns the histogram bucket holding length n (0 <= n <= maxLength).
func bucketOf(n int64) int {
	if n < 2*subBuckets {
		return int(n)
	}
	e := bits.Len64(uint64(n)) - 1 // floor(log2 n), at least 7
	shift := e - 6                 // keep the six bits after the leading one
	sub := int(n>>shift) & (subBuckets - 1)
	return subBuckets + (e-6)*subBuckets + sub
}

// histogram counts answer lengths in log-spaced buckets. Each bucket keeps
// the exact sum of its lengths, so means computed from it are exact and a
// bucket stands for its members by their mean.
type histogram struct {
	count []int64
	sum   []int64
	n     int64 // total count
}

func (h *histogram) add(n int64) {
	n = clampLength(n)
	b := bucketOf(n)
	if b >= len(h.count) {
		grow := b + 1 - len(h.count)
		h.count = append(h.count, make([]int64, grow)...)
		h.sum = append(h.sum, make([]int64, grow)...)
	}
	h.count[b]++
	h.sum[b] += n
	h.n++
}

// each calls f for every non-empty bucket in increasing order of length,
// with the mean length of its members and their number.
func (h *histogram) each(f func(mean float64, count int64)) {
	for b, c := range h.count {
		if c > 0 {
			f(float64(h.sum[b])/float64(c), c)
		}
	}
}

// logMoments accumulates count, sum and sum of squares of log(1+length),
// the sufficient statistics of exact observations in the lognormal fit.
type logMoments struct {
	n, sum, sumSq float64
}

func (m *logMoments) add(n int64) {
	y := math.Log1p(float64(clampLength(n)))
	m.n++
	m.sum += y
	m.sumSq += y * y
}

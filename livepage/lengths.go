package livepage

import "math"

// Bucket is one bar of the completion-length histogram: answers of at
// least Lo and less than Hi output tokens.
type Bucket struct {
	Lo    int64 `json:"lo"`
	Hi    int64 `json:"hi"`
	Count int64 `json:"count"`
}

// Lengths is the distribution of the output tokens of the answers
// written so far.
type Lengths struct {
	Count int64 `json:"count"`
	// Mean is the plain mean of the answers counted, in tokens.
	Mean float64 `json:"mean"`
	Max  int64   `json:"max"`
	// Truncated counts answers that stopped at max_tokens.
	Truncated int64 `json:"truncated"`
	// Buckets cover the range from the shortest answer to the longest,
	// on a logarithmic scale (answer lengths are heavy-tailed), empty
	// ones between included.
	Buckets []Bucket `json:"buckets"`
}

// perOctave is how many histogram buckets each doubling of length gets.
const perOctave = 4

// maxBucket bounds the bucket index (lengths up to 2^40 tokens), so the
// histogram's size is fixed whatever it is fed.
const maxBucket = 40 * perOctave

// lengthHistogram counts answer lengths in log-spaced buckets: bucket 0
// holds zero-token answers, bucket i > 0 lengths in
// [2^((i-1)/perOctave), 2^(i/perOctave)).
type lengthHistogram struct {
	counts   [maxBucket + 1]int64
	n, trunc int64
	sum      float64
	longest  int64
}

func bucketIndex(n int64) int {
	if n <= 0 {
		return 0
	}
	i := int(math.Floor(math.Log2(float64(n))*perOctave)) + 1
	// Floating point may put an exact power on the wrong side of an edge.
	for i > 1 && n < bucketLo(i) {
		i--
	}
	for i < maxBucket && n >= bucketLo(i+1) {
		i++
	}
	return min(i, maxBucket)
}

// bucketLo is the least length of bucket i (its lengths are integers, so
// the edge is rounded up).
func bucketLo(i int) int64 {
	if i <= 0 {
		return 0
	}
	return int64(math.Ceil(math.Exp2(float64(i-1) / perOctave)))
}

func (h *lengthHistogram) add(tokens int64, truncated bool) {
	tokens = max(tokens, 0)
	h.counts[bucketIndex(tokens)]++
	h.n++
	h.sum += float64(tokens)
	h.longest = max(h.longest, tokens)
	if truncated {
		h.trunc++
	}
}

func (h *lengthHistogram) snapshot() Lengths {
	l := Lengths{Count: h.n, Max: h.longest, Truncated: h.trunc, Buckets: []Bucket{}}
	if h.n == 0 {
		return l
	}
	l.Mean = h.sum / float64(h.n)
	first, last := -1, 0
	for i, c := range h.counts {
		if c > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	for i := first; i <= last; i++ {
		lo, hi := bucketLo(i), bucketLo(i+1)
		if hi <= lo { // below 2^(1/perOctave) several edges round alike
			if h.counts[i] == 0 {
				continue
			}
			hi = lo + 1
		}
		l.Buckets = append(l.Buckets, Bucket{Lo: lo, Hi: hi, Count: h.counts[i]})
	}
	return l
}

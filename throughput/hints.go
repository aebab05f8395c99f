package throughput

import (
	"math"
	"math/rand/v2"
	"sort"
)

// hintSample is how many (hint, length) pairs the rank correlation is
// computed from: a uniform sample of the hinted answers (reservoir
// sampling), so that memory and the time of a snapshot stay the same at
// a million answers. Its standard error is about 1/√4096, under 0.02.
const hintSample = 4096

// hintPair is an answer's length hint and the tokens it took.
type hintPair struct{ hint, length float64 }

// HintAccuracy measures how well length hints ranked the answers: it
// keeps a uniform sample of the hinted answers. Its zero value is ready:
// no answer seen yet. It is not safe for concurrent use.
type HintAccuracy struct {
	seen   int
	sample []hintPair
	rng    *rand.Rand
}

// Add records one answer of length tokens with its hint; a zero hint is
// no hint and is not counted.
func (h *HintAccuracy) Add(hint, length int) {
	if hint <= 0 {
		return
	}
	h.seen++
	p := hintPair{float64(hint), float64(length)}
	if len(h.sample) < hintSample {
		h.sample = append(h.sample, p)
		return
	}
	if h.rng == nil {
		h.rng = rand.New(rand.NewPCG(0x41e7, 0x5eed))
	}
	if i := h.rng.IntN(h.seen); i < hintSample {
		h.sample[i] = p
	}
}

// Correlation returns Spearman's rank correlation between hints and
// lengths over the sample, and how many hinted answers there were. The
// correlation is NaN with fewer than 3 of them, or when either side has
// no spread at all.
func (h *HintAccuracy) Correlation() (float64, int) {
	if len(h.sample) < 3 {
		return math.NaN(), h.seen
	}
	hints := ranks(h.sample, func(p hintPair) float64 { return p.hint })
	lengths := ranks(h.sample, func(p hintPair) float64 { return p.length })
	return pearson(hints, lengths), h.seen
}

// ranks returns the rank of each pair's value, ties sharing the mean of
// their ranks.
func ranks(ps []hintPair, value func(hintPair) float64) []float64 {
	idx := make([]int, len(ps))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return value(ps[idx[a]]) < value(ps[idx[b]]) })
	r := make([]float64, len(ps))
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && value(ps[idx[j]]) == value(ps[idx[i]]) {
			j++
		}
		mean := float64(i+j+1) / 2 // ranks i+1..j
		for _, k := range idx[i:j] {
			r[k] = mean
		}
		i = j
	}
	return r
}

// pearson returns the correlation of x and y: NaN when either has no
// spread.
func pearson(x, y []float64) float64 {
	n := float64(len(x))
	mx, my := mean(x), mean(y)
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 || n < 2 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

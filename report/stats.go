package report

import (
	"math"
	"slices"
)

// Percentile is the p-th percentile (0 to 100) of sorted values,
// interpolated linearly between the two nearest ranks (numpy's default),
// so that p50 of an even count is the mean of the middle two. NaN for no
// values.
func Percentile(sorted []float32, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	p = min(max(p, 0), 100)
	pos := p / 100 * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	frac := pos - float64(lo)
	return float64(sorted[lo]) + frac*(float64(sorted[hi])-float64(sorted[lo]))
}

// Point is a point of a chart, in data units.
type Point struct{ X, Y float64 }

// CDF is the empirical distribution function of sorted values as at most
// maxPoints points (X a value, Y the fraction of values at or below it),
// enough to draw it: a million latencies are drawn from a few hundred
// quantiles. The first point is the smallest value and the last is the
// largest at 1. Nil for no values.
func CDF(sorted []float32, maxPoints int) []Point {
	n := len(sorted)
	if n == 0 {
		return nil
	}
	maxPoints = max(maxPoints, 2)
	if n <= maxPoints {
		pts := make([]Point, 0, n)
		for i, v := range sorted {
			// Of equal values only the last counts: the fraction at or
			// below it.
			if i+1 < n && sorted[i+1] == v {
				continue
			}
			pts = append(pts, Point{float64(v), float64(i+1) / float64(n)})
		}
		return pts
	}
	pts := make([]Point, 0, maxPoints)
	for k := range maxPoints {
		i := int(math.Round(float64(k) / float64(maxPoints-1) * float64(n-1)))
		pts = append(pts, Point{float64(sorted[i]), float64(i+1) / float64(n)})
	}
	return pts
}

// Histogram counts values in Bins of equal Width from zero, each value v
// in bin floor(v/Width), by category (for completion lengths, the finish
// reason). Its zero value has no bins.
type Histogram struct {
	Width      float64
	Categories []string
	// Counts[c][b] is how many values of category c fell in bin b.
	Counts [][]int
}

// Bins is the number of bins.
func (h *Histogram) Bins() int {
	if len(h.Counts) == 0 {
		return 0
	}
	return len(h.Counts[0])
}

// NewHistogram bins values (each with its category, an index into
// categories) into about target bins of a round width (1, 2 or 5 times a
// power of ten, at least 1) that cover zero to the largest value.
func NewHistogram(values []uint32, category []uint8, categories []string, target int) *Histogram {
	var top uint32
	for _, v := range values {
		top = max(top, v)
	}
	width := max(niceStep(float64(top+1), max(target, 1)), 1) // tokens are whole
	bins := int(float64(top)/width) + 1
	h := &Histogram{Width: width, Categories: categories, Counts: make([][]int, len(categories))}
	for c := range h.Counts {
		h.Counts[c] = make([]int, bins)
	}
	for i, v := range values {
		h.Counts[category[i]][int(float64(v)/width)]++
	}
	return h
}

// niceStep is a round step (1, 2 or 5 times a power of ten, at least 1
// when span is) that divides span into at most about n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// ticks are round values from lo to hi (lo and hi rounded out to the
// step), about n of them, for an axis.
func ticks(lo, hi float64, n int) (step float64, vals []float64) {
	if hi <= lo {
		hi = lo + 1
	}
	step = niceStep(hi-lo, n)
	start := math.Floor(lo/step) * step
	for v := start; v <= hi+step/2 && len(vals) < 4*n+2; v += step {
		vals = append(vals, v)
	}
	if last := vals[len(vals)-1]; last < hi {
		vals = append(vals, last+step)
	}
	return step, vals
}

// sortFloats sorts values in place and returns them.
func sortFloats(v []float32) []float32 {
	slices.Sort(v)
	return v
}

// median of float64 values, NaN for none; v is sorted in place.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

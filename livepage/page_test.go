package livepage

import (
	"testing"
	"time"
)

// Twelve hours of events every five seconds keep no more points than the
// bound, from the first event to the last, spread evenly enough to draw.
func TestHistoryStaysBounded(t *testing.T) {
	h := newHistory(DefaultHistory)
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).UnixMilli()
	const every = 5000
	n := 12 * 3600 * 1000 / every
	for i := range n {
		h.add(Point{T: start + int64(i)*every, Completed: i})
		if len(h.points) > DefaultHistory {
			t.Fatalf("after %d points the history holds %d, more than %d", i+1, len(h.points), DefaultHistory)
		}
	}
	if cap(h.points) > DefaultHistory+1 {
		t.Errorf("the history's array grew to %d points", cap(h.points))
	}
	pts := h.snapshot()
	if pts[0].T != start || pts[len(pts)-1].Completed != n-1 {
		t.Errorf("history runs from %d (completed %d) to completed %d; want from the first event to the last",
			pts[0].T, pts[0].Completed, pts[len(pts)-1].Completed)
	}
	if len(pts) < DefaultHistory/2 {
		t.Errorf("only %d points kept of a %d-point budget", len(pts), DefaultHistory)
	}
	span := pts[len(pts)-1].T - pts[0].T
	for i := 1; i < len(pts); i++ {
		if gap := pts[i].T - pts[i-1].T; gap <= 0 || gap > span/int64(DefaultHistory/8) {
			t.Fatalf("gap of %d ms between points %d and %d of a %d ms span", gap, i-1, i, span)
		}
	}
}

// An event older than the newest point is left out: the chart runs
// forwards.
func TestHistoryIgnoresOlderPoints(t *testing.T) {
	h := newHistory(10)
	h.add(Point{T: 2000})
	h.add(Point{T: 1000})
	if len(h.points) != 1 {
		t.Errorf("points %v; want the older one left out", h.points)
	}
}

// Every length falls in the bucket whose edges hold it.
func TestBucketEdges(t *testing.T) {
	for n := int64(0); n < 1<<22; n = n*11/10 + 1 {
		i := bucketIndex(n)
		if lo, hi := bucketLo(i), bucketLo(i+1); n < lo || (i < maxBucket && n >= hi) {
			t.Fatalf("%d tokens in bucket %d [%d, %d)", n, i, lo, hi)
		}
	}
	if i := bucketIndex(1 << 62); i != maxBucket {
		t.Errorf("a huge length is in bucket %d, want the last, %d", i, maxBucket)
	}
	var h lengthHistogram
	for _, n := range []int64{0, 1, 2, 3, 100, 1000, 1000, -5} {
		h.add(n, n == 1000)
	}
	l := h.snapshot()
	var sum int64
	for i, b := range l.Buckets {
		sum += b.Count
		if b.Hi <= b.Lo || (i > 0 && b.Lo < l.Buckets[i-1].Hi) {
			t.Errorf("bucket %d [%d, %d) after [%d, %d)", i, b.Lo, b.Hi, l.Buckets[max(i-1, 0)].Lo, l.Buckets[max(i-1, 0)].Hi)
		}
	}
	if sum != 8 || l.Count != 8 || l.Max != 1000 || l.Truncated != 2 {
		t.Errorf("histogram %+v; want 8 answers, the longest 1000 tokens, 2 truncated", l)
	}
}

package report

import (
	"math"
	"slices"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

func TestPercentile(t *testing.T) {
	ten := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		name   string
		sorted []float32
		p      float64
		want   float64
	}{
		{"median of even count interpolates", []float32{1, 2, 3, 4}, 50, 2.5},
		{"p0 is the least", ten, 0, 1},
		{"p100 is the most", ten, 100, 10},
		{"p90 between ranks", ten, 90, 9.1},
		{"p99", ten, 99, 9.91},
		{"one value", []float32{7}, 99, 7},
		{"p above 100 clamps", ten, 120, 10},
	} {
		if got := Percentile(tc.sorted, tc.p); math.Abs(got-tc.want) > 1e-4 {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("Percentile of nothing = %v, want NaN", got)
	}
}

func TestCDF(t *testing.T) {
	got := CDF([]float32{1, 1, 2, 3}, 100)
	want := []Point{{1, 0.5}, {2, 0.75}, {3, 1}}
	if !slices.Equal(got, want) {
		t.Errorf("CDF of 1 1 2 3 = %v, want %v", got, want)
	}
	if CDF(nil, 10) != nil {
		t.Error("CDF of nothing is not nil")
	}
	many := make([]float32, 1000)
	for i := range many {
		many[i] = float32(i)
	}
	pts := CDF(many, 11)
	if len(pts) != 11 {
		t.Fatalf("CDF of 1000 values in 11 points has %d", len(pts))
	}
	if pts[0] != (Point{0, 0.001}) || pts[10] != (Point{999, 1}) || pts[5] != (Point{500, 0.501}) {
		t.Errorf("CDF points %v, want (0, 0.001) first, (500, 0.501) in the middle, (999, 1) last", pts)
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].X < pts[i-1].X || pts[i].Y <= pts[i-1].Y {
			t.Errorf("CDF not increasing at %d: %v", i, pts)
		}
	}
}

func TestHistogram(t *testing.T) {
	values := []uint32{0, 1, 9, 10, 25, 3}
	cat := []uint8{0, 1, 0, 0, 1, 1}
	h := NewHistogram(values, cat, []string{"stop", "length"}, 3)
	if h.Width != 10 || h.Bins() != 3 {
		t.Fatalf("width %v, %d bins; want width 10 (26 tokens in about 3 round bins), 3 bins", h.Width, h.Bins())
	}
	want := [][]int{{2, 1, 0}, {2, 0, 1}}
	for c := range want {
		if !slices.Equal(h.Counts[c], want[c]) {
			t.Errorf("counts of %s = %v, want %v", h.Categories[c], h.Counts[c], want[c])
		}
	}
	// All answers empty: one bin of width 1, not a width below a token.
	h = NewHistogram([]uint32{0, 0}, []uint8{0, 0}, []string{"stop"}, 40)
	if h.Width != 1 || h.Bins() != 1 || h.Counts[0][0] != 2 {
		t.Errorf("zeros: width %v, counts %v; want width 1, [[2]]", h.Width, h.Counts)
	}
}

func TestNiceStepAndTicks(t *testing.T) {
	for _, tc := range []struct {
		span float64
		n    int
		want float64
	}{{100, 5, 20}, {26, 3, 10}, {7, 8, 1}, {0.9, 5, 0.2}, {3600, 8, 500}, {0, 5, 1}} {
		if got := niceStep(tc.span, tc.n); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("niceStep(%v, %d) = %v, want %v", tc.span, tc.n, got, tc.want)
		}
	}
	step, vals := ticks(0, 13, 5)
	if step != 5 || !slices.Equal(vals, []float64{0, 5, 10, 15}) {
		t.Errorf("ticks(0, 13) = %v %v, want step 5 and 0 5 10 15", step, vals)
	}
	for _, tc := range []struct {
		v, step float64
		want    string
	}{{12000, 2000, "12k"}, {0.5, 0.1, "0.5"}, {2500000, 500000, "2500k"}, {3e6, 1e6, "3M"}, {2000, 2000, "2k"}, {0, 2000, "0"}, {1500, 500, "1500"}, {250, 50, "250"}, {0.25, 0.05, "0.25"}} {
		if got := tickLabel(tc.v, tc.step); got != tc.want {
			t.Errorf("tickLabel(%v, %v) = %q, want %q", tc.v, tc.step, got, tc.want)
		}
	}
}

func TestBand(t *testing.T) {
	for _, tc := range []struct {
		e    event
		want bool
	}{
		{event{eta: 100, etaLow: 80, etaHigh: 130}, true},
		{event{eta: 100}, false}, // written before the band existed
		{event{eta: -1, etaLow: -1, etaHigh: -1}, false},
		{event{phase: schema.PhaseDone}, true}, // done: all three zero
		{event{phase: schema.PhaseDraining}, false},
	} {
		if got := hasBand(tc.e); got != tc.want {
			t.Errorf("hasBand(%+v) = %v, want %v", tc.e, got, tc.want)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4200: "-4,200"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

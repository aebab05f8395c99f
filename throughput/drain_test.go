package throughput

import (
	"math"
	"testing"
)

// TestDrainTime checks the drain against cases worked by hand: at a
// constant speed the last request ends when its own length says; with a
// speed-up, requests that finish early make the others faster.
func TestDrainTime(t *testing.T) {
	// Remaining lengths uniform on [0, 1000]: P(R > r) = 1 − r/1000.
	uniform := func(r float64) float64 { return math.Max(1-r/1000, 0) }
	constant := newDecodeModel(10, 2, 2, 1, 0, 1)
	if got := drainTime(uniform, 1000, 2, 800, constant); math.Abs(got-80) > 1e-9 {
		t.Errorf("constant speed: drain %v s, want 80 (the longest, 800 tokens, at 10 tokens/s)", got)
	}
	// Two requests, half of a full step fixed: rho = 2, so one request
	// alone decodes (2+2)/(2+1) = 4/3 as fast. Blom's position for the
	// shorter of two is (1 − 0.375)/2.25: r1 = 1000·0.625/2.25.
	half := newDecodeModel(10, 2, 2, 0.5, 0, 1)
	r1 := 1000 * 0.625 / 2.25
	want := r1/10 + (800-r1)/(10*4.0/3)
	if got := drainTime(uniform, 1000, 2, 800, half); math.Abs(got-want) > 0.5 {
		t.Errorf("half fixed: drain %v s, want %v", got, want)
	}
	if got := drainTime(uniform, 1000, 0, 800, half); got != 0 {
		t.Errorf("no request: drain %v, want 0", got)
	}
	if got := half.at(2); got != 10 {
		t.Errorf("speed at the batch it was measured at: %v, want 10", got)
	}
	// The same two requests beside two of another run on a window of
	// four: rho = 4·0.5/0.5 = 4, and one request alone decodes
	// (4+2+2)/(4+1+2) = 8/7 as fast, not 4/3: the other run's requests
	// keep the batch from emptying.
	shared := newDecodeModel(10, 2, 4, 0.5, 2, 1)
	if got, want := shared.at(1), 10*8.0/7; math.Abs(got-want) > 1e-9 {
		t.Errorf("beside another run: speed alone %v, want %v", got, want)
	}
	want = r1/10 + (800-r1)/(10*8.0/7)
	if got := drainTime(uniform, 1000, 2, 800, shared); math.Abs(got-want) > 0.5 {
		t.Errorf("beside another run: drain %v s, want %v", got, want)
	}
}

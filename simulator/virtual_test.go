package simulator

import (
	"testing"
	"time"
)

// TestVirtual runs one closed loop of clients through two virtual
// engines advanced in steps of different sizes: the finish times must be
// the same (the engine's steps do not depend on how time is handed
// out), the lengths those the server would give, and streamed tokens
// only grow, up to a max_tokens cut reported as truncated.
func TestVirtual(t *testing.T) {
	const clients, total = 50, 400
	run := func(step time.Duration) ([]time.Duration, []int) {
		v, err := NewVirtual(Config{})
		if err != nil {
			t.Fatal(err)
		}
		var at []time.Duration
		var lengths []int
		next := 0
		submit := func() {
			if next < total {
				if _, err := v.Submit(next, calibrationPrompt(next), 0); err != nil {
					t.Fatal(err)
				}
				next++
			}
		}
		var probe *VirtualRequest
		v.OnFinish = func(r *VirtualRequest) {
			if r.Tokens() != r.Length() {
				t.Errorf("request %d finished with %d of %d tokens", r.ID, r.Tokens(), r.Length())
			}
			at = append(at, r.Finished)
			lengths = append(lengths, r.Length())
			submit()
		}
		for range clients {
			submit()
		}
		probe, _ = v.Submit(-1, calibrationPrompt(-1), 5)
		last := 0
		for now := step; len(at) < total+1 && now < 24*time.Hour; now += step {
			v.AdvanceTo(now)
			if n := probe.Tokens(); n < last {
				t.Fatalf("streamed tokens went back from %d to %d", last, n)
			} else {
				last = n
			}
		}
		if len(at) != total+1 {
			t.Fatalf("%d of %d requests finished", len(at), total+1)
		}
		if probe.Length() != 5 || !probe.Truncated() {
			t.Errorf("a request with max_tokens 5: length %d, truncated %v", probe.Length(), probe.Truncated())
		}
		return at, lengths
	}
	fine, lengths := run(100 * time.Millisecond)
	coarse, _ := run(time.Minute)
	for i := range fine {
		if fine[i] != coarse[i] {
			t.Fatalf("finish %d at %v advancing by 100ms, at %v by the minute", i, fine[i], coarse[i])
		}
	}
	srv, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, n := range lengths {
		seen[n] = true
	}
	for i := range 20 {
		if n := srv.OutputTokens(calibrationPrompt(i), 0); !seen[n] {
			t.Errorf("prompt %d: the server would answer with %d tokens, no virtual request did", i, n)
		}
	}
	if _, err := NewVirtual(Config{Speed: -1}); err == nil {
		t.Error("a bad config was accepted")
	}
}

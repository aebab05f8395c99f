package policy

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestHistogramQuantile(t *testing.T) {
	from := []Bucket{{0.1, 0}, {1, 0}, {math.Inf(1), 0}}
	to := []Bucket{{0.1, 50}, {1, 90}, {math.Inf(1), 100}}
	for _, c := range []struct {
		q     float64
		least int
		want  time.Duration
	}{
		{0.5, 1, 100 * time.Millisecond},   // the 50th of 100 is the first bucket's top
		{0.7, 1, 550 * time.Millisecond},   // 20 of the 40 between 0.1 and 1
		{0.95, 1, 1000 * time.Millisecond}, // in +Inf: the highest finite bound
		{0.5, 101, -1},                     // too few observations
	} {
		if got := histogramQuantile(c.q, from, to, c.least); got != c.want {
			t.Errorf("q %v: %v, want %v", c.q, got, c.want)
		}
	}
	if got := histogramQuantile(0.5, []Bucket{{0.2, 0}}, to, 1); got != -1 {
		t.Errorf("readings that do not line up: %v, want -1", got)
	}
}

func TestYieldPolicy(t *testing.T) {
	p := Config{Window: 200, Yield: true, TTFTSLO: time.Second}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	slow := []Bucket{{0.5, 0}, {2, 100}, {math.Inf(1), 100}} // every first token between 0.5 and 2 s
	quick := []Bucket{{0.5, 100}, {2, 100}, {math.Inf(1), 100}}
	for _, c := range []struct {
		name    string
		c       Config
		s       Snapshot
		m       YieldMemory
		wantCap int
		why     string
		clear   int
	}{
		{"off: nothing", Config{Window: 200}, Snapshot{Now: t0, Size: 200, Generating: 200, Load: LoadReading{Load: &Load{Running: 210, Waiting: 5}}}, YieldMemory{}, 0, "", 0},
		{"alone on the server: nothing", p, Snapshot{Now: t0, Size: 200, Generating: 204, Load: LoadReading{Load: &Load{Running: 200, Waiting: 4}}}, YieldMemory{}, 0, "", 0},
		{"others wait: below ours by what waits, and room for them", p, Snapshot{Now: t0, Size: 200, Generating: 200, Load: LoadReading{Load: &Load{Running: 200, Waiting: 10}}}, YieldMemory{}, 180, "requests wait in the server", 0},
		{"at least the allowance", p, Snapshot{Now: t0, Size: 200, Generating: 200, Load: LoadReading{Load: &Load{Running: 200, Waiting: 1}}}, YieldMemory{}, 189, "requests wait in the server", 0},
		{"at most halving", p, Snapshot{Now: t0, Size: 100, Generating: 100, Load: LoadReading{Load: &Load{Running: 100, Waiting: 400}}}, YieldMemory{}, 50, "requests wait in the server", 0},
		{"a cap still taking effect is kept", p, Snapshot{Now: t0, Size: 150, Generating: 150, Load: LoadReading{Load: &Load{Running: 150, Waiting: 5}}}, YieldMemory{Cap: 120}, 120, "", 0},
		{"a cap in effect is lowered", p, Snapshot{Now: t0, Size: 120, Generating: 118, Load: LoadReading{Load: &Load{Running: 150, Waiting: 5}}}, YieldMemory{Cap: 120}, 105, "requests wait in the server", 0},
		{"clear, not yet long enough: kept", p, Snapshot{Now: t0, Size: 150, Generating: 140, Load: LoadReading{Load: &Load{Running: 145}}}, YieldMemory{Cap: 150, Clear: 1}, 150, "", 2},
		{"clear long enough: grows a fiftieth", p, Snapshot{Now: t0, Size: 150, Generating: 140, Load: LoadReading{Load: &Load{Running: 145}}}, YieldMemory{Cap: 150, Clear: 2}, 153, "", 3},
		{"grown to the window: released", p, Snapshot{Now: t0, Size: 199, Generating: 140, Load: LoadReading{Load: &Load{Running: 145}}}, YieldMemory{Cap: 199, Clear: 5}, 0, "", 0},
		{"TTFT over the SLO", p, Snapshot{Now: at(60), Size: 200, Generating: 180, Load: LoadReading{Load: &Load{Running: 180, TTFT: slow}}},
			YieldMemory{History: []TTFTReading{{At: at(0), Buckets: []Bucket{{0.5, 0}, {2, 0}, {math.Inf(1), 0}}}}}, 171, "time to first token p95 is 1.925s", 0},
		{"TTFT within the SLO", p, Snapshot{Now: at(60), Size: 200, Generating: 180, Load: LoadReading{Load: &Load{Running: 180, TTFT: quick}}},
			YieldMemory{History: []TTFTReading{{At: at(0), Buckets: []Bucket{{0.5, 0}, {2, 0}, {math.Inf(1), 0}}}}}, 0, "", 0},
		{"no reading: kept", p, Snapshot{Now: t0, Size: 150}, YieldMemory{Cap: 150}, 150, "", 0},
		{"others in the server, nothing waits: room for them at once", p, Snapshot{Now: t0, Size: 200, Generating: 120, Load: LoadReading{Load: &Load{Running: 125}}},
			YieldMemory{Batch: 128}, 116, "room for 5 requests", 0},
		{"room kept while growing back", p, Snapshot{Now: t0, Size: 118, Generating: 118, Load: LoadReading{Load: &Load{Running: 120}}},
			YieldMemory{Cap: 118, Clear: 5, Batch: 128, OthersSeen: t0}, 119, "", 6},
		{"others gone a minute: the batch is no reason", p, Snapshot{Now: t0.Add(2 * time.Minute), Size: 110, Generating: 110, Load: LoadReading{Load: &Load{Running: 110}}},
			YieldMemory{Cap: 110, Clear: 5, Batch: 128, OthersSeen: t0}, 112, "", 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, m := YieldPolicy(c.c, c.s, c.m)
			if d.Cap != c.wantCap || m.Cap != c.wantCap || !strings.Contains(d.Why, c.why) || (c.why == "") != (d.Why == "") || m.Clear != c.clear {
				t.Errorf("cap %d (memory %d, clear %d), why %q; want %d, clear %d, why with %q", d.Cap, m.Cap, m.Clear, d.Why, c.wantCap, c.clear, c.why)
			}
		})
	}
}

// After the cap is lowered, the TTFT p95 counts only first tokens that
// came after: the slow ones before do not lower it again.
func TestYieldCountsFreshFirstTokens(t *testing.T) {
	p := Config{Window: 200, Yield: true, TTFTSLO: time.Second}
	slow := func(n float64) []Bucket { return []Bucket{{0.5, 0}, {2, n}, {math.Inf(1), n}} }
	m := YieldMemory{History: []TTFTReading{{At: t0, Buckets: slow(0)}}}
	d, m := YieldPolicy(p, Snapshot{Now: t0.Add(10 * time.Second), Size: 200, Generating: 200, Load: LoadReading{Load: &Load{Running: 200, TTFT: slow(100)}}}, m)
	if d.Cap != 190 {
		t.Fatalf("slow first tokens: cap %d, want 190", d.Cap)
	}
	// Few first tokens since, all quick: the slow ones before do not count.
	quick := []Bucket{{0.5, 10}, {2, 110}, {math.Inf(1), 110}}
	d, m = YieldPolicy(p, Snapshot{Now: t0.Add(20 * time.Second), Size: 190, Generating: 185, Load: LoadReading{Load: &Load{Running: 185, TTFT: quick}}}, m)
	if d.Cap != 190 || d.Why != "" || d.P95 != -1 {
		t.Errorf("10 first tokens since the Cap: cap %d, why %q, p95 %v; want the cap kept and the p95 unknown", d.Cap, d.Why, d.P95)
	}
	_ = m
}

// The history keeps one reading at or before the span's start, and the
// p95 is over the span.
func TestYieldHistorySpan(t *testing.T) {
	p := Config{Window: 200, Yield: true, TTFTSLO: time.Second}
	var m YieldMemory
	var d YieldDecision
	for s := 0; s <= 120; s += 10 {
		n := float64(s * 10)
		r := Snapshot{Now: t0.Add(time.Duration(s) * time.Second), Size: 200, Generating: 100,
			Load: LoadReading{Load: &Load{Running: 100, TTFT: []Bucket{{0.1, n}, {1, n}, {math.Inf(1), n}}}}}
		d, m = YieldPolicy(p, r, m)
	}
	if first := m.History[0].At; !first.Equal(t0.Add(60 * time.Second)) {
		t.Errorf("oldest reading kept at %v, want the span's start, 60s", first.Sub(t0))
	}
	if d.P95 <= 0 || d.P95 > 100*time.Millisecond {
		t.Errorf("p95 %v, want within the first bucket", d.P95)
	}
}

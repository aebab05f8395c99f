package worker

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestHistogramQuantile(t *testing.T) {
	from := []bucket{{0.1, 0}, {1, 0}, {math.Inf(1), 0}}
	to := []bucket{{0.1, 50}, {1, 90}, {math.Inf(1), 100}}
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
	if got := histogramQuantile(0.5, []bucket{{0.2, 0}}, to, 1); got != -1 {
		t.Errorf("readings that do not line up: %v, want -1", got)
	}
}

func TestYieldPolicy(t *testing.T) {
	p := policy{window: 200, yield: true, ttftSLO: time.Second}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	slow := []bucket{{0.5, 0}, {2, 100}, {math.Inf(1), 100}} // every first token between 0.5 and 2 s
	quick := []bucket{{0.5, 100}, {2, 100}, {math.Inf(1), 100}}
	for _, c := range []struct {
		name    string
		p       policy
		r       readings
		m       yieldMemory
		wantCap int
		why     string
		clear   int
	}{
		{"off: nothing", policy{window: 200}, readings{now: t0, size: 200, generating: 200, load: &backendLoad{Running: 210, Waiting: 5}}, yieldMemory{}, 0, "", 0},
		{"alone on the server: nothing", p, readings{now: t0, size: 200, generating: 204, load: &backendLoad{Running: 200, Waiting: 4}}, yieldMemory{}, 0, "", 0},
		{"others wait: below ours by what waits, and room for them", p, readings{now: t0, size: 200, generating: 200, load: &backendLoad{Running: 200, Waiting: 10}}, yieldMemory{}, 180, "requests wait in the server", 0},
		{"at least the allowance", p, readings{now: t0, size: 200, generating: 200, load: &backendLoad{Running: 200, Waiting: 1}}, yieldMemory{}, 189, "requests wait in the server", 0},
		{"at most halving", p, readings{now: t0, size: 100, generating: 100, load: &backendLoad{Running: 100, Waiting: 400}}, yieldMemory{}, 50, "requests wait in the server", 0},
		{"a cap still taking effect is kept", p, readings{now: t0, size: 150, generating: 150, load: &backendLoad{Running: 150, Waiting: 5}}, yieldMemory{cap: 120}, 120, "", 0},
		{"a cap in effect is lowered", p, readings{now: t0, size: 120, generating: 118, load: &backendLoad{Running: 150, Waiting: 5}}, yieldMemory{cap: 120}, 105, "requests wait in the server", 0},
		{"clear, not yet long enough: kept", p, readings{now: t0, size: 150, generating: 140, load: &backendLoad{Running: 145}}, yieldMemory{cap: 150, clear: 1}, 150, "", 2},
		{"clear long enough: grows a fiftieth", p, readings{now: t0, size: 150, generating: 140, load: &backendLoad{Running: 145}}, yieldMemory{cap: 150, clear: 2}, 153, "", 3},
		{"grown to the window: released", p, readings{now: t0, size: 199, generating: 140, load: &backendLoad{Running: 145}}, yieldMemory{cap: 199, clear: 5}, 0, "", 0},
		{"TTFT over the SLO", p, readings{now: at(60), size: 200, generating: 180, load: &backendLoad{Running: 180, TTFT: slow}},
			yieldMemory{history: []ttftReading{{at: at(0), buckets: []bucket{{0.5, 0}, {2, 0}, {math.Inf(1), 0}}}}}, 171, "time to first token p95 is 1.925s", 0},
		{"TTFT within the SLO", p, readings{now: at(60), size: 200, generating: 180, load: &backendLoad{Running: 180, TTFT: quick}},
			yieldMemory{history: []ttftReading{{at: at(0), buckets: []bucket{{0.5, 0}, {2, 0}, {math.Inf(1), 0}}}}}, 0, "", 0},
		{"no reading: kept", p, readings{now: t0, size: 150}, yieldMemory{cap: 150}, 150, "", 0},
		{"others in the server, nothing waits: room for them at once", p, readings{now: t0, size: 200, generating: 120, load: &backendLoad{Running: 125}},
			yieldMemory{batch: 128}, 116, "room for 5 requests", 0},
		{"room kept while growing back", p, readings{now: t0, size: 118, generating: 118, load: &backendLoad{Running: 120}},
			yieldMemory{cap: 118, clear: 5, batch: 128, othersSeen: t0}, 119, "", 6},
		{"others gone a minute: the batch is no reason", p, readings{now: t0.Add(2 * time.Minute), size: 110, generating: 110, load: &backendLoad{Running: 110}},
			yieldMemory{cap: 110, clear: 5, batch: 128, othersSeen: t0}, 112, "", 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, m := yieldPolicy(c.p, c.r, c.m)
			if d.cap != c.wantCap || m.cap != c.wantCap || !strings.Contains(d.why, c.why) || (c.why == "") != (d.why == "") || m.clear != c.clear {
				t.Errorf("cap %d (memory %d, clear %d), why %q; want %d, clear %d, why with %q", d.cap, m.cap, m.clear, d.why, c.wantCap, c.clear, c.why)
			}
		})
	}
}

// After the cap is lowered, the TTFT p95 counts only first tokens that
// came after: the slow ones before do not lower it again.
func TestYieldCountsFreshFirstTokens(t *testing.T) {
	p := policy{window: 200, yield: true, ttftSLO: time.Second}
	slow := func(n float64) []bucket { return []bucket{{0.5, 0}, {2, n}, {math.Inf(1), n}} }
	m := yieldMemory{history: []ttftReading{{at: t0, buckets: slow(0)}}}
	d, m := yieldPolicy(p, readings{now: t0.Add(10 * time.Second), size: 200, generating: 200, load: &backendLoad{Running: 200, TTFT: slow(100)}}, m)
	if d.cap != 190 {
		t.Fatalf("slow first tokens: cap %d, want 190", d.cap)
	}
	// Few first tokens since, all quick: the slow ones before do not count.
	quick := []bucket{{0.5, 10}, {2, 110}, {math.Inf(1), 110}}
	d, m = yieldPolicy(p, readings{now: t0.Add(20 * time.Second), size: 190, generating: 185, load: &backendLoad{Running: 185, TTFT: quick}}, m)
	if d.cap != 190 || d.why != "" || d.p95 != -1 {
		t.Errorf("10 first tokens since the cap: cap %d, why %q, p95 %v; want the cap kept and the p95 unknown", d.cap, d.why, d.p95)
	}
	_ = m
}

// The history keeps one reading at or before the span's start, and the
// p95 is over the span.
func TestYieldHistorySpan(t *testing.T) {
	p := policy{window: 200, yield: true, ttftSLO: time.Second}
	var m yieldMemory
	var d yieldDecision
	for s := 0; s <= 120; s += 10 {
		n := float64(s * 10)
		r := readings{now: t0.Add(time.Duration(s) * time.Second), size: 200, generating: 100,
			load: &backendLoad{Running: 100, TTFT: []bucket{{0.1, n}, {1, n}, {math.Inf(1), n}}}}
		d, m = yieldPolicy(p, r, m)
	}
	if first := m.history[0].at; !first.Equal(t0.Add(60 * time.Second)) {
		t.Errorf("oldest reading kept at %v, want the span's start, 60s", first.Sub(t0))
	}
	if d.p95 <= 0 || d.p95 > 100*time.Millisecond {
		t.Errorf("p95 %v, want within the first bucket", d.p95)
	}
}

func TestCapWindow(t *testing.T) {
	fixed := policy{window: 200}
	auto := policy{auto: true, window: 200, maxWindow: 1024}
	for _, c := range []struct {
		name      string
		p         policy
		size      int
		d         windowDecision
		y         yieldDecision
		wasCapped bool
		want      int
	}{
		{"no cap: the decision", auto, 300, windowDecision{size: 450}, yieldDecision{}, false, 450},
		{"the sizer's growth is capped", auto, 300, windowDecision{size: 450}, yieldDecision{cap: 320}, true, 320},
		{"a cap above: the decision", auto, 300, windowDecision{size: 310}, yieldDecision{cap: 400}, true, 310},
		{"the window as it is, capped", auto, 300, windowDecision{}, yieldDecision{cap: 250, why: "x"}, false, 250},
		{"a fixed window held down grows with its cap", fixed, 150, windowDecision{}, yieldDecision{cap: 153}, true, 153},
		{"a fixed window comes back when the cap goes", fixed, 153, windowDecision{}, yieldDecision{}, true, 200},
		{"a fixed window shrunk by the tail stays", fixed, 150, windowDecision{}, yieldDecision{}, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := capWindow(c.p, readings{size: c.size}, c.d, c.y, c.wasCapped)
			if got.size != c.want {
				t.Errorf("size %d (why %q), want %d", got.size, got.why, c.want)
			}
		})
	}
}

package policy

import (
	"errors"
	"testing"
	"time"
)

func TestWindowRule(t *testing.T) {
	load := func(running, waiting, kv, pre float64) Load {
		return Load{Running: running, Waiting: waiting, KVUsage: kv, Preemptions: pre}
	}
	before := load(0, 0, 0, 3)
	noQueue := load(20, 0, 0.1, 0)
	for _, tc := range []struct {
		name      string
		cur, ours int
		prev      *Load
		ceiling   float64
		now       Load
		want      int
		why       string
	}{
		{"grows by half on free slots", 200, 200, nil, 0, load(200, 0, 0.3, 0), 300, "free slots"},
		{"grows a tiny window", 1, 1, nil, 0, load(1, 0, 0, 0), 2, "free slots"},
		{"never above max", 400, 400, nil, 0, load(400, 0, 0.3, 0), 500, "free slots"},
		{"holds at max", 500, 500, nil, 0, load(500, 0, 0.3, 0), 500, ""},
		{"does not grow when the window is not full", 200, 100, nil, 0, load(100, 0, 0.2, 0), 200, ""},
		{"does not grow with a full KV cache", 200, 200, nil, 0, load(200, 0, 0.95, 0), 200, ""},
		{"holds a queue within the allowance", 68, 68, nil, 0, load(64, 4, 0.5, 0), 68, ""},
		{"shrinks toward running plus allowance", 200, 200, nil, 0, load(96, 104, 0.5, 0), 101, "requests waiting"},
		{"shrinks to its share when others wait too", 200, 100, nil, 0, load(96, 104, 0.5, 0), 51, "requests waiting"},
		{"shrinks a deep queue", 40, 40, nil, 0, load(10, 30, 0.5, 0), 14, "requests waiting"},
		{"a queue of others' without ours holds", 50, 0, nil, 0, load(64, 40, 0.5, 0), 50, ""},
		{"shrinks on preemptions", 200, 200, &before, 0, load(150, 50, 0.99, 7), 150, "preemptions"},
		{"shrinks by a tenth at least on preemptions", 100, 100, &before, 0, load(100, 0, 0.99, 4), 90, "preemptions"},
		{"no preemption without a reading before", 100, 100, nil, 0, load(100, 0, 0.5, 4), 150, "free slots"},
		{"never below one", 3, 1, &before, 0, load(0, 50, 0.99, 9), 1, "preemptions"},
		{"a queue beside free slots is no reason to shrink", 69, 69, nil, 64, load(51, 13, 0.1, 0), 69, ""},
		{"a queue beside a full KV cache is", 69, 69, nil, 64, load(51, 13, 0.95, 0), 55, "requests waiting"},
		{"a queue seen once is no reason to shrink", 41, 41, &noQueue, 0, load(20, 21, 0.1, 0), 41, ""},
		{"a window above max comes down", 800, 0, nil, 0, load(0, 0, 0, 0), 500, "bounds"},
		{"grows by half up to the known batch and its allowance", 41, 41, nil, 64, load(41, 0, 0.3, 0), 62, "free slots"},
		{"grows by half no further than the known batch", 62, 62, nil, 64, load(62, 0, 0.3, 0), 68, "free slots"},
		{"grows by one past the known batch", 68, 68, nil, 64, load(64, 0, 0.3, 0), 69, "free slots"},
		{"forgets a batch that proved too small", 68, 68, nil, 64, load(68, 0, 0.3, 0), 102, "free slots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := &WindowRule{Max: 500, Prev: tc.prev, Ceiling: tc.ceiling}
			got, why := rule.Next(tc.cur, tc.ours, tc.now)
			if got != tc.want || why != tc.why {
				t.Fatalf("next(%d, ours %d, %+v) = %d %q, want %d %q", tc.cur, tc.ours, tc.now, got, why, tc.want, tc.why)
			}
		})
	}
}

// Against a server of 64 slots that it alone feeds, the rule settles on
// 64 plus the allowance from below and from above, and stays near it
// when a reading now and then finds the queue empty (a finished
// sequence replaced from the queue while its successor is on its way).
func TestWindowRuleSettles(t *testing.T) {
	const slots = 64
	for _, start := range []int{1, 32, 200, 1024} {
		rule := &WindowRule{}
		cur := start
		for i := range 60 {
			now := Load{Running: float64(min(cur, slots)), Waiting: float64(max(cur-slots, 0)), KVUsage: 0.5}
			if i%3 == 2 {
				now.Waiting = 0 // the queue caught empty
			}
			cur, _ = rule.Next(cur, cur, now)
			if i >= 20 && (cur < slots || cur > slots+2*minQueue) {
				t.Fatalf("from %d: window %d at reading %d, want %d to %d", start, cur, i, slots, slots+2*minQueue)
			}
		}
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSizeWindow(t *testing.T) {
	auto := Config{Auto: true, Window: 200, MaxWindow: 500}
	readErr := errors.New("connection refused")
	noMetrics := errors.New("no vllm:num_requests_running and vllm:num_requests_waiting in the metrics")
	noReader := errors.New(NoMetricsReader)
	free := &Load{Running: 200, KVUsage: 0.3}
	for _, c := range []struct {
		name  string
		c     Config
		s     Snapshot
		m     LoadMemory
		want  WindowDecision
		wantM LoadMemory
	}{
		{"a fixed window is left alone", Config{Window: 200}, Snapshot{Size: 200, Generating: 200, Load: LoadReading{Load: free}}, LoadMemory{}, WindowDecision{}, LoadMemory{}},
		{"grows by the rule", auto, Snapshot{Size: 200, Generating: 200, Load: LoadReading{Load: free}}, LoadMemory{}, WindowDecision{Size: 300, Why: "free slots"}, LoadMemory{Read: true}},
		{"unchanged by the rule", auto, Snapshot{Size: 200, Generating: 100, Load: LoadReading{Load: free}}, LoadMemory{Read: true}, WindowDecision{}, LoadMemory{Read: true}},
		{"nothing read", auto, Snapshot{Size: 200}, LoadMemory{}, WindowDecision{}, LoadMemory{}},
		{"a failed reading before any is counted", auto, Snapshot{Size: 200, Load: LoadReading{Err: readErr}}, LoadMemory{Failures: 1}, WindowDecision{}, LoadMemory{Failures: 2}},
		{"falls back after fallbackAfter failures", auto, Snapshot{Size: 300, Load: LoadReading{Err: readErr}}, LoadMemory{Failures: fallbackAfter - 1},
			WindowDecision{Size: 200, FallBack: &FallBack{Why: noLoadMetrics, Err: readErr}}, LoadMemory{Failures: fallbackAfter, Fixed: true}},
		{"falls back at once when no metrics are served", auto, Snapshot{Size: 200, Load: LoadReading{Err: noMetrics, NotServed: true}}, LoadMemory{},
			WindowDecision{Size: 200, FallBack: &FallBack{Why: noLoadMetrics, Err: noMetrics}}, LoadMemory{Failures: 1, Fixed: true}},
		{"a backend that cannot read metrics", auto, Snapshot{Size: 200, Load: LoadReading{Err: noReader, NotServed: true, NoReader: true}}, LoadMemory{},
			WindowDecision{Size: 200, FallBack: &FallBack{Why: NoMetricsReader}}, LoadMemory{Failures: 1, Fixed: true}},
		{"a failure after a good reading keeps the window", auto, Snapshot{Size: 250, Load: LoadReading{Err: readErr}}, LoadMemory{Read: true}, WindowDecision{Kept: readErr}, LoadMemory{Read: true}},
		{"fallen back for good", auto, Snapshot{Size: 200, Load: LoadReading{Load: free}}, LoadMemory{Fixed: true}, WindowDecision{}, LoadMemory{Fixed: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, m := SizeWindow(c.c, c.s, Memory{Load: c.m})
			if got.Size != c.want.Size || got.Why != c.want.Why || got.Kept != c.want.Kept ||
				(got.FallBack == nil) != (c.want.FallBack == nil) || got.FallBack != nil && *got.FallBack != *c.want.FallBack {
				t.Errorf("decision %+v (fall back %+v), want %+v (fall back %+v)", got, got.FallBack, c.want, c.want.FallBack)
			}
			if m.Load != c.wantM {
				t.Errorf("memory %+v, want %+v", m.Load, c.wantM)
			}
		})
	}
}

func TestCapWindow(t *testing.T) {
	fixed := Config{Window: 200}
	auto := Config{Auto: true, Window: 200, MaxWindow: 1024}
	for _, c := range []struct {
		name      string
		c         Config
		size      int
		d         WindowDecision
		y         YieldDecision
		wasCapped bool
		want      int
	}{
		{"no cap: the decision", auto, 300, WindowDecision{Size: 450}, YieldDecision{}, false, 450},
		{"the sizer's growth is capped", auto, 300, WindowDecision{Size: 450}, YieldDecision{Cap: 320}, true, 320},
		{"a cap above: the decision", auto, 300, WindowDecision{Size: 310}, YieldDecision{Cap: 400}, true, 310},
		{"the window as it is, capped", auto, 300, WindowDecision{}, YieldDecision{Cap: 250, Why: "x"}, false, 250},
		{"a fixed window held down grows with its cap", fixed, 150, WindowDecision{}, YieldDecision{Cap: 153}, true, 153},
		{"a fixed window comes back when the cap goes", fixed, 153, WindowDecision{}, YieldDecision{}, true, 200},
		{"a fixed window shrunk by the tail stays", fixed, 150, WindowDecision{}, YieldDecision{}, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := capWindow(c.c, Snapshot{Size: c.size}, c.d, c.y, c.wasCapped)
			if got.Size != c.want {
				t.Errorf("size %d (why %q), want %d", got.Size, got.Why, c.want)
			}
		})
	}
}

package worker

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestWindowRule(t *testing.T) {
	load := func(running, waiting, kv, pre float64) backendLoad {
		return backendLoad{Running: running, Waiting: waiting, KVUsage: kv, Preemptions: pre}
	}
	before := load(0, 0, 0, 3)
	noQueue := load(20, 0, 0.1, 0)
	for _, tc := range []struct {
		name      string
		cur, ours int
		prev      *backendLoad
		ceiling   float64
		now       backendLoad
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
			rule := &windowRule{Max: 500, prev: tc.prev, ceiling: tc.ceiling}
			got, why := rule.next(tc.cur, tc.ours, tc.now)
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
		rule := &windowRule{}
		cur := start
		for i := range 60 {
			now := backendLoad{Running: float64(min(cur, slots)), Waiting: float64(max(cur-slots, 0)), KVUsage: 0.5}
			if i%3 == 2 {
				now.Waiting = 0 // the queue caught empty
			}
			cur, _ = rule.next(cur, cur, now)
			if i >= 20 && (cur < slots || cur > slots+2*minQueue) {
				t.Fatalf("from %d: window %d at reading %d, want %d to %d", start, cur, i, slots, slots+2*minQueue)
			}
		}
	}
}

func TestParseLoad(t *testing.T) {
	text := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 60.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:num_preemptions_total{engine="1",model_name="m"} 5.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="0.1"} 3
vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="1"} 8
vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="+Inf"} 9
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 4.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 9
vllm:time_to_first_token_seconds_bucket{engine="1",model_name="m",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",model_name="m",le="1"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",model_name="m",le="+Inf"} 2
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 3.1
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2
`
	got, err := parseLoad([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	ttft := got.TTFT
	got.TTFT = nil
	if want := (backendLoad{Running: 64, Waiting: 3, KVUsage: 0.75, Preemptions: 7}); got.Running != want.Running ||
		got.Waiting != want.Waiting || got.KVUsage != want.KVUsage || got.Preemptions != want.Preemptions {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	if want := []bucket{{0.1, 4}, {1, 9}, {math.Inf(1), 11}}; !slices.Equal(ttft, want) {
		t.Fatalf("TTFT histogram %v, want %v summed over engines", ttft, want)
	}
	old := "vllm:num_requests_running 1\nvllm:num_requests_waiting 2\nvllm:gpu_cache_usage_perc 0.5\n"
	if got, err := parseLoad([]byte(old)); err != nil || got.KVUsage != 0.5 || got.Waiting != 2 {
		t.Fatalf("older vLLM's names: %+v, %v", got, err)
	}
	if _, err := parseLoad([]byte("# TYPE go_goroutines gauge\ngo_goroutines 12\n")); !errors.Is(err, errNoLoadMetrics) {
		t.Fatalf("metrics of another server: err %v, want errNoLoadMetrics", err)
	}
	if _, err := parseLoad([]byte("<html>not metrics</html>")); err == nil {
		t.Fatal("an HTML page parsed as metrics")
	}
}

package worker

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

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
	if want := (policy.Load{Running: 64, Waiting: 3, KVUsage: 0.75, Preemptions: 7}); got.Running != want.Running ||
		got.Waiting != want.Waiting || got.KVUsage != want.KVUsage || got.Preemptions != want.Preemptions {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	if want := []policy.Bucket{{LE: 0.1, Count: 4}, {LE: 1, Count: 9}, {LE: math.Inf(1), Count: 11}}; !slices.Equal(ttft, want) {
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

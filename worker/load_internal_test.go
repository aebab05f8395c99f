package worker

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/aerie-dev/aerie/engine"
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
	got, err := parseLoad([]byte(text), engine.LoadMetrics{})
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
	if got, err := parseLoad([]byte(old), engine.LoadMetrics{}); err != nil || got.KVUsage != 0.5 || got.Waiting != 2 {
		t.Fatalf("older vLLM's names: %+v, %v", got, err)
	}
	if _, err := parseLoad([]byte("# TYPE go_goroutines gauge\ngo_goroutines 12\n"), engine.LoadMetrics{}); !errors.Is(err, errNoLoadMetrics) {
		t.Fatalf("metrics of another server: err %v, want errNoLoadMetrics", err)
	}
	if _, err := parseLoad([]byte("<html>not metrics</html>"), engine.LoadMetrics{}); err == nil {
		t.Fatal("an HTML page parsed as metrics")
	}
}

// TestParseLoadOfEachEngine reads each engine's series by its profile's
// names, as the engines name them (see engine.Profiles' sources).
func TestParseLoadOfEachEngine(t *testing.T) {
	for _, tc := range []struct {
		engine engine.Name
		text   string
	}{
		{engine.SGLang, "sglang:num_running_reqs{model_name=\"m\"} 30\nsglang:num_queue_reqs{model_name=\"m\"} 4\nsglang:token_usage{model_name=\"m\"} 0.5\n"},
		{engine.TRTLLM, "trtllm_num_requests_running{model_name=\"m\",engine_type=\"trtllm\"} 30\ntrtllm_num_requests_waiting{model_name=\"m\",engine_type=\"trtllm\"} 4\ntrtllm_kv_cache_utilization{model_name=\"m\",engine_type=\"trtllm\"} 0.5\n"},
		{engine.LlamaCpp, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 30\nllamacpp:requests_deferred 4\nllamacpp:kv_cache_usage_ratio 0.5\n"},
	} {
		p, err := engine.Lookup(string(tc.engine))
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseLoad([]byte(tc.text), p.Load)
		if err != nil || got.Running != 30 || got.Waiting != 4 || got.KVUsage != 0.5 {
			t.Errorf("%s: %+v, %v", tc.engine, got, err)
		}
		if _, err := parseLoad([]byte(tc.text), engine.LoadMetrics{}); !errors.Is(err, errNoLoadMetrics) {
			t.Errorf("%s's metrics read with vLLM's names: err %v, want errNoLoadMetrics", tc.engine, err)
		}
	}
}

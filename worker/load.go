package worker

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// errNoLoadMetrics says a server's /metrics has no vLLM request gauges:
// not vLLM, or a proxy in front of it.
var errNoLoadMetrics = errors.New("no vllm:num_requests_running and vllm:num_requests_waiting in the metrics")

// parseLoad reads a policy.Load from a Prometheus text exposition.
// Running and waiting are required; KV usage and preemptions read as 0
// when absent.
func parseLoad(text []byte) (policy.Load, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return policy.Load{}, fmt.Errorf("read the backend's metrics: %w", err)
	}
	running, okR := sumOf(fams["vllm:num_requests_running"])
	waiting, okW := sumOf(fams["vllm:num_requests_waiting"])
	if !okR || !okW {
		return policy.Load{}, errNoLoadMetrics
	}
	kv, ok := maxOf(fams["vllm:kv_cache_usage_perc"])
	if !ok {
		kv, _ = maxOf(fams["vllm:gpu_cache_usage_perc"])
	}
	pre, ok := sumOf(fams["vllm:num_preemptions_total"])
	if !ok {
		pre, _ = sumOf(fams["vllm:num_preemptions"])
	}
	return policy.Load{Running: running, Waiting: waiting, KVUsage: kv, Preemptions: pre,
		TTFT: histogramOf(fams["vllm:time_to_first_token_seconds"])}, nil
}

// histogramOf sums a histogram family's cumulative buckets over its label
// sets, by upper bound; nil when the family is absent or no histogram.
func histogramOf(f *dto.MetricFamily) []policy.Bucket {
	if f == nil {
		return nil
	}
	sum := map[float64]float64{}
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				sum[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		// The count is the +Inf bucket, whether or not the text had one.
		sum[math.Inf(1)] += float64(h.GetSampleCount())
	}
	if len(sum) == 0 {
		return nil
	}
	out := make([]policy.Bucket, 0, len(sum))
	for le, n := range sum {
		out = append(out, policy.Bucket{LE: le, Count: n})
	}
	slices.SortFunc(out, func(a, b policy.Bucket) int { return cmp.Compare(a.LE, b.LE) })
	return out
}

// sumOf adds a family's values over its label sets; ok is false when the
// family is absent or empty.
func sumOf(f *dto.MetricFamily) (sum float64, ok bool) {
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if v, has := valueOf(m); has {
			sum, ok = sum+v, true
		}
	}
	return sum, ok
}

// maxOf is the largest of a family's values: a fraction such as KV-cache
// usage does not add up across engines.
func maxOf(f *dto.MetricFamily) (most float64, ok bool) {
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if v, has := valueOf(m); has && (!ok || v > most) {
			most, ok = v, true
		}
	}
	return most, ok
}

func valueOf(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		v = m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

package simulator

import "sort"

// ttftBuckets are the upper bounds, in seconds, of vLLM's
// vllm:time_to_first_token_seconds histogram (vLLM V1's list).
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
	0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

// histogram counts observations into fixed buckets, as a Prometheus
// histogram does; the engine keeps it under its lock and the collector
// exposes it with vLLM's labels at scrape time.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative
	count  uint64
	sum    float64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	if i := sort.SearchFloat64s(h.bounds, v); i < len(h.bounds) {
		h.counts[i]++
	}
	h.count++
	h.sum += v
}

// cumulative is the count at or below each bound, keyed by bound, as
// prometheus.MustNewConstHistogram takes it.
func (h *histogram) cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(h.bounds))
	var n uint64
	for i, b := range h.bounds {
		n += h.counts[i]
		out[b] = n
	}
	return out
}

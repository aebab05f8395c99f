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

	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// errNoLoadMetrics says a server's metrics have no request gauges of its
// engine: metrics not turned on, another engine, or a proxy in front.
var errNoLoadMetrics = errors.New("no running and waiting request gauges in the metrics")

// parseLoad reads a policy.Load from a Prometheus text exposition, by the
// series names of the server's engine (names; the zero value is
// vLLM's). Running and waiting are required; KV usage and preemptions
// read as 0 when absent.
func parseLoad(text []byte, names engine.LoadMetrics) (policy.Load, error) {
	if names.Running == nil {
		names = engine.Default().Load
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return policy.Load{}, fmt.Errorf("read the backend's metrics: %w", err)
	}
	running, okR := sumOf(family(fams, names.Running))
	waiting, okW := sumOf(family(fams, names.Waiting))
	if !okR || !okW {
		return policy.Load{}, fmt.Errorf("%w (want %s and %s)", errNoLoadMetrics, names.Running[0], names.Waiting[0])
	}
	kv, _ := maxOf(family(fams, names.KVUsage))
	pre, _ := sumOf(family(fams, names.Preemptions))
	return policy.Load{Running: running, Waiting: waiting, KVUsage: kv, Preemptions: pre,
		TTFT: histogramOf(family(fams, names.TTFT))}, nil
}

// family is the first of the families named (a series' names, newest
// first) that the exposition has; nil when none.
func family(fams map[string]*dto.MetricFamily, names []string) *dto.MetricFamily {
	for _, n := range names {
		if f := fams[n]; f != nil {
			return f
		}
	}
	return nil
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

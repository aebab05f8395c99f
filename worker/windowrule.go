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
)

// backendLoad is one reading of a vLLM server's own metrics.
type backendLoad struct {
	// Running and Waiting are the requests in the engine's batch and in
	// its queue (vllm:num_requests_running, vllm:num_requests_waiting),
	// summed over engines and models.
	Running, Waiting float64
	// KVUsage is the KV cache's use, 0 to 1 (vllm:kv_cache_usage_perc,
	// vllm:gpu_cache_usage_perc before vLLM 0.10): the fullest engine's.
	KVUsage float64
	// Preemptions counts the sequences the engine has preempted since it
	// started (vllm:num_preemptions_total), summed.
	Preemptions float64
	// TTFT is the server's time-to-first-token histogram
	// (vllm:time_to_first_token_seconds), summed over engines and
	// models: cumulative counts by upper bound, ascending; nil when the
	// server has none.
	TTFT []bucket
}

// bucket is one cumulative bucket of a histogram: the observations at
// or below le.
type bucket struct {
	le    float64
	count float64
}

// errNoLoadMetrics says a server's /metrics has no vLLM request gauges:
// not vLLM, or a proxy in front of it.
var errNoLoadMetrics = errors.New("no vllm:num_requests_running and vllm:num_requests_waiting in the metrics")

// parseLoad reads a backendLoad from a Prometheus text exposition.
// Running and waiting are required; KV usage and preemptions read as 0
// when absent.
func parseLoad(text []byte) (backendLoad, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return backendLoad{}, fmt.Errorf("read the backend's metrics: %w", err)
	}
	running, okR := sumOf(fams["vllm:num_requests_running"])
	waiting, okW := sumOf(fams["vllm:num_requests_waiting"])
	if !okR || !okW {
		return backendLoad{}, errNoLoadMetrics
	}
	kv, ok := maxOf(fams["vllm:kv_cache_usage_perc"])
	if !ok {
		kv, _ = maxOf(fams["vllm:gpu_cache_usage_perc"])
	}
	pre, ok := sumOf(fams["vllm:num_preemptions_total"])
	if !ok {
		pre, _ = sumOf(fams["vllm:num_preemptions"])
	}
	return backendLoad{Running: running, Waiting: waiting, KVUsage: kv, Preemptions: pre,
		TTFT: histogramOf(fams["vllm:time_to_first_token_seconds"])}, nil
}

// histogramOf sums a histogram family's cumulative buckets over its label
// sets, by upper bound; nil when the family is absent or no histogram.
func histogramOf(f *dto.MetricFamily) []bucket {
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
	out := make([]bucket, 0, len(sum))
	for le, n := range sum {
		out = append(out, bucket{le: le, count: n})
	}
	slices.SortFunc(out, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
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

// Defaults of windowRule.
const (
	// DefaultMaxWindow bounds --window auto: far above any one server's
	// running batch (vLLM's max-num-seqs is 256 to 1,024), yet small
	// enough that a wrong reading cannot take thousands of prompts.
	DefaultMaxWindow = 1024
	// kvHighWater is the KV-cache use above which the window does not
	// grow: more sequences would soon be preempted.
	kvHighWater = 0.9
	// queueShare and minQueue make the queue a server may hold for us
	// (the allowance): 5% of its running batch, at least 4 requests, so
	// that a finishing sequence is replaced within the engine's next
	// step instead of after a round trip through NATS.
	queueShare = 0.05
	minQueue   = 4
)

// windowRule sizes a worker's window from its backend's load: every
// running slot busy, and only a small queue (the allowance) inside the
// server. It is a pure function of the readings it has been given, the
// window and what the worker has at the backend, so that it can be
// tested on its own. The zero value bounds the window by
// DefaultMaxWindow.
type windowRule struct {
	// Max bounds the window; zero means DefaultMaxWindow.
	Max int

	// prev is the reading before, nil before the first.
	prev *backendLoad
	// ceiling is the most requests seen running while others waited: the
	// server's batch as far as it is known (0 while unknown). Past it the
	// window grows by one a reading, not by half: a queue seen empty for
	// a moment, as a finished sequence is replaced, is no sign of room.
	ceiling float64
}

// allowance is the queue kept inside a server running `running`.
func allowance(running float64) float64 {
	return max(minQueue, math.Ceil(queueShare*running))
}

// next returns the window after reading now, given the window cur and
// the requests this worker has at the backend (ours), and says why it
// changed ("" when it did not):
//
//   - the engine preempted sequences since the last reading: shrink to
//     our share of those running, and by a tenth at least;
//   - more requests wait than the allowance, at this reading and the one
//     before, and the batch is full (as many run as ever ran with a
//     queue, or the KV cache is full): shrink toward our share of
//     running plus the allowance (never cutting a running request: the
//     window only stops new pulls);
//   - nothing waits, the KV cache is below its high-water mark and the
//     window is what limits us (our requests fill it, up to half the
//     allowance): grow by half, so a large server fills in a few
//     readings, up to the known batch plus the allowance, and by one
//     past it;
//   - otherwise (a queue within the allowance) keep it.
//
// Our share is ours over running plus waiting: with several workers on
// one server each gives up its part of the queue. The result is between
// 1 and Max.
func (r *windowRule) next(cur, ours int, now backendLoad) (int, string) {
	prev := r.prev
	r.prev = &now
	limit := r.Max
	if limit <= 0 {
		limit = DefaultMaxWindow
	}
	clamp := func(n int) int { return min(max(n, 1), limit) }
	share := 1.0
	if total := now.Running + now.Waiting; total > 0 {
		share = min(1, float64(ours)/total)
	}
	// A request that has just arrived waits for the engine's next step
	// even on a server with free slots: the queue that counts is the one
	// that lasted from the reading before to this one, and the batch the
	// larger of the two readings'.
	queued, running := now.Waiting, now.Running
	if prev != nil {
		queued, running = min(queued, prev.Waiting), max(running, prev.Running)
	}
	allow := allowance(running)
	// A queue beside free slots is the engine catching up (admission at
	// its next step, a burst of prefill), not a lack of room: the batch
	// is full when as many run as ever ran with a queue, or the KV cache
	// is (vLLM admits while it has blocks).
	full := r.ceiling == 0 || running >= 0.95*r.ceiling || now.KVUsage >= kvHighWater
	switch {
	case queued > 0:
		r.ceiling = max(r.ceiling, running)
	case now.Waiting == 0 && now.Running > r.ceiling:
		r.ceiling = 0 // more run than we thought fit: unknown again
	}
	switch {
	case prev != nil && now.Preemptions > prev.Preemptions && ours > 0:
		n := clamp(min(int(math.Floor(share*now.Running)), int(math.Floor(0.9*float64(cur)))))
		return n, reasonIf(n != cur, "preemptions")
	case queued > allow && ours > 0 && full:
		n := clamp(min(cur, int(math.Ceil(share*(running+allow)))))
		return n, reasonIf(n != cur, "requests waiting")
	case now.Waiting == 0 && now.KVUsage < kvHighWater && float64(ours)+allow/2 >= float64(cur):
		n := max(cur+1, int(math.Ceil(1.5*float64(cur))))
		if r.ceiling > 0 {
			n = max(cur+1, min(n, int(math.Ceil(r.ceiling+allowance(r.ceiling)))))
		}
		n = clamp(n)
		return n, reasonIf(n != cur, "free slots")
	}
	return clamp(cur), reasonIf(clamp(cur) != cur, "bounds")
}

func reasonIf(changed bool, why string) string {
	if changed {
		return why
	}
	return ""
}

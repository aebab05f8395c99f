package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/metrics/metricstest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/worker"
)

// Each way a prompt is settled counts under its outcome, and each failed
// request under its class.
func TestMetricsOutcomes(t *testing.T) {
	b := setup(t, 3, provision.Options{MaxDeliver: 3})
	_, url := newFakeLLM(t, &fakeLLM{status: func(prompt string, n int) int {
		switch {
		case strings.HasSuffix(prompt, "p0000"):
			return 400
		case strings.HasSuffix(prompt, "p0001") && n < 3:
			return 503
		case strings.HasSuffix(prompt, "p0002"):
			return 429
		}
		return 200
	}})
	reg := prometheus.NewRegistry()
	w, _ := b.start(t, worker.Config{Window: 5, RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond, BreakerThreshold: 100, Metrics: reg}, url)
	b.waitSettled(t, 20*time.Second)
	waitOutcomes(t, reg, 7)

	f := metricstest.Gather(t, reg)
	for outcome, want := range map[string]float64{
		worker.OutcomeCompleted:  1, // p0001 on its third attempt
		worker.OutcomePermanent:  2, // p0000 at once, p0002 after 3 attempts
		worker.OutcomeTransient:  4, // p0001 twice, p0002 twice
		worker.OutcomeTruncated:  0,
		worker.OutcomeHandedBack: 0,
	} {
		if got, ok := f.Sum("aerie_worker_outcomes_total", "outcome", outcome, "worker", w.Name(), "run", "test"); !ok || got != want {
			t.Errorf("outcome %s: %v (series present: %v), want %v", outcome, got, ok, want)
		}
	}
	for class, want := range map[string]float64{worker.ErrorBadRequest: 1, worker.ErrorServer: 2, worker.ErrorOverloaded: 3, worker.ErrorMisconfigured: 0} {
		if got, _ := f.Sum("aerie_worker_backend_errors_total", "class", class); got != want {
			t.Errorf("backend errors of class %s: %v, want %v", class, got, want)
		}
	}
	if got, _ := f.Sum("aerie_worker_request_duration_seconds"); got != 1 {
		t.Errorf("request duration histogram counts %v requests, want the one answered", got)
	}
	if got, _ := f.Sum("aerie_worker_window_size"); got != 5 {
		t.Errorf("window size %v, want 5", got)
	}
}

// The breaker gauge is 1 while a sick backend pauses the worker and 0
// once it heals; the paused time and the prompts handed back count.
func TestMetricsBreaker(t *testing.T) {
	const n = 20
	b := setup(t, n, provision.Options{})
	f, url := newFakeLLM(t, &fakeLLM{})
	f.sick.Store(true)
	reg := prometheus.NewRegistry()
	b.start(t, worker.Config{Window: 5, RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond, Metrics: reg}, url)
	brokertest.Eventually(t, 20*time.Second, func() bool {
		v, _ := metricstest.Gather(t, reg).Sum("aerie_worker_breaker_open")
		return v == 1
	}, "the breaker gauge to say open")
	f.sick.Store(false)
	b.waitSettled(t, 60*time.Second)
	waitOutcomes(t, reg, n, "outcome", worker.OutcomeCompleted)
	brokertest.Eventually(t, 20*time.Second, func() bool {
		v, _ := metricstest.Gather(t, reg).Sum("aerie_worker_breaker_open")
		return v == 0
	}, "the breaker gauge to say closed")
	m := metricstest.Gather(t, reg)
	if v, _ := m.Sum("aerie_worker_paused_seconds_total"); v <= 0 {
		t.Errorf("paused seconds %v, want > 0", v)
	}
	if v, _ := m.Sum("aerie_worker_backend_errors_total", "class", worker.ErrorServer); v < worker.DefaultBreakerThreshold {
		t.Errorf("server errors %v, want at least the breaker's threshold %d", v, worker.DefaultBreakerThreshold)
	}
	if v, _ := m.Sum("aerie_worker_outcomes_total", "outcome", worker.OutcomeCompleted); v != n {
		t.Errorf("completed %v, want %d", v, n)
	}
	if v, _ := m.Sum("aerie_worker_streamed_tokens_total"); v <= 0 {
		t.Errorf("streamed tokens %v, want > 0", v)
	}
}

// waitOutcomes waits until the settlements counted under the outcomes
// match selects (every outcome when none) add up to n. A worker counts
// a settlement once the server has confirmed its ack, nak or term: a
// moment after the consumer's ack floor, which waitSettled watches, has
// passed the message.
func waitOutcomes(t *testing.T, reg *prometheus.Registry, n float64, match ...string) {
	t.Helper()
	brokertest.Eventually(t, 10*time.Second, func() bool {
		v, _ := metricstest.Gather(t, reg).Sum("aerie_worker_outcomes_total", match...)
		return v >= n
	}, "every settlement counted")
}

package worker

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// Outcome label values of aerie_worker_outcomes_total, one per way a
// delivery of a prompt is settled (see settle).
const (
	// OutcomeCompleted: the answer is stored and the prompt acknowledged.
	OutcomeCompleted = "completed"
	// OutcomeTruncated: the answer stopped at max_tokens; stored (flagged)
	// when the run keeps such answers, dead-lettered when it does not.
	OutcomeTruncated = "truncated"
	// OutcomeTransient: handed back with a delay, to be tried again; the
	// failure may count against the prompt.
	OutcomeTransient = "transient"
	// OutcomePermanent: dead-lettered for any reason but truncation (a
	// 400 before streaming, attempts used up, an undecodable prompt).
	OutcomePermanent = "permanent"
	// OutcomeHandedBack: given back without counting against the prompt:
	// the backend is down, the worker is stopping, or, at the end of a
	// run, the prompt waited without a first token while another worker
	// was idle.
	OutcomeHandedBack = "handed_back"
	// OutcomeHedged: acknowledged without an answer of its own: a hedge
	// on a faster worker stored the answer first (hedge.go).
	OutcomeHedged = "hedged"
)

var outcomeLabels = []string{OutcomeCompleted, OutcomeTruncated, OutcomeTransient, OutcomePermanent, OutcomeHandedBack, OutcomeHedged}

// Result label values of aerie_worker_hedges_total: how a hedge this
// worker sent ended.
const (
	// HedgeWon: its answer was stored first, and is the run's.
	HedgeWon = "won"
	// HedgeLost: the original's answer was stored first; the hedge was
	// cancelled, or its answer dropped.
	HedgeLost = "lost"
	// HedgeFailed: the hedge's request or its storing failed; the
	// original went on.
	HedgeFailed = "failed"
)

var hedgeLabels = []string{HedgeWon, HedgeLost, HedgeFailed}

// Error class label values of aerie_worker_backend_errors_total.
const (
	// ErrorServer: the backend failed (a 5xx, an error inside a stream,
	// a connection refused or cut, no answer in time).
	ErrorServer = "server"
	// ErrorOverloaded: the backend refused the request for now (429 and
	// other 4xx that say to try later).
	ErrorOverloaded = "overloaded"
	// ErrorBadRequest: the backend refused the request as sent (a 400
	// such as a prompt longer than the context).
	ErrorBadRequest = "bad_request"
	// ErrorMisconfigured: our credentials refused or the run's model not
	// served: an operator's to fix.
	ErrorMisconfigured = "misconfigured"
)

var errorLabels = []string{ErrorServer, ErrorOverloaded, ErrorBadRequest, ErrorMisconfigured}

// durationBuckets (seconds) span a first token from a warm server (50 ms)
// to a long reasoning answer (10 minutes).
var durationBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}

// metrics are one worker's Prometheus metrics, every one labelled with
// the worker's name and a run: the run a request, outcome or count is
// of; for what belongs to the worker (its window, its breaker), every
// run it serves, one series each, so that a dashboard filtered by run
// shows the workers of that run. A nil *metrics records nothing: a
// worker without Config.Metrics.
type metrics struct {
	outcomes *prometheus.CounterVec
	errors   *prometheus.CounterVec
	ttft     *prometheus.HistogramVec
	latency  *prometheus.HistogramVec
	hedges   *prometheus.CounterVec
	// hedgedTokens counts the completion tokens generated twice and
	// thrown away, on either side of a hedge.
	hedgedTokens *prometheus.CounterVec
}

// newMetrics returns the metrics of the worker named name, counting
// from now; nil when reg is nil (none are kept). The state collector,
// which reads the worker's state through r at scrape time, and the
// counters are registered with reg; run, when the worker serves one,
// has its series made at once.
func newMetrics(reg prometheus.Registerer, name, run string, r *reporter) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	labels := prometheus.Labels{"worker": name}
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "aerie_worker_outcomes_total",
			Help:        "Prompt deliveries settled, by outcome: completed (stored), truncated (cut at max_tokens, stored or dead-lettered as the run says), transient (handed back to be tried again), permanent (dead-lettered), handed_back (given back uncounted: backend down, worker stopping, or waiting without a first token at the end of the run while another worker was idle), hedged (acknowledged because a hedge on a faster worker stored the answer first); a hedge this worker won counts as completed or truncated.",
			ConstLabels: labels,
		}, []string{"run", "outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "aerie_worker_backend_errors_total",
			Help:        "Failed requests to the backend, by class: server (5xx, error mid-stream, connection refused or cut, timeout), overloaded (429 and other try-later refusals), bad_request (400 before streaming), misconfigured (credentials refused, model not served).",
			ConstLabels: labels,
		}, []string{"run", "class"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "aerie_worker_time_to_first_token_seconds",
			Help:        "Time from sending a request to its first streamed token, of the requests answered.",
			ConstLabels: labels,
			Buckets:     durationBuckets,
		}, []string{"run"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "aerie_worker_request_duration_seconds",
			Help:        "Time from sending a request to its last token, of the requests answered.",
			ConstLabels: labels,
			Buckets:     durationBuckets,
		}, []string{"run"}),
		hedges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "aerie_worker_hedges_total",
			Help:        "Hedges sent at the end of a run (second copies of a slower worker's requests), by how they ended: won (stored first), lost (the original stored first), failed.",
			ConstLabels: labels,
		}, []string{"run", "result"}),
		hedgedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "aerie_worker_hedged_tokens_total",
			Help:        "Completion tokens this worker generated and threw away because the other copy of a hedged request was stored first.",
			ConstLabels: labels,
		}, []string{"run"}),
	}
	if run != "" {
		m.addRun(run)
	}
	for _, c := range []prometheus.Collector{m.outcomes, m.errors, m.ttft, m.latency, m.hedges, m.hedgedTokens, newStateCollector(r, run, labels)} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("worker %s: register metrics: %w", name, err)
		}
	}
	return m, nil
}

// addRun makes every label value of run's series from the start, so that
// rates and alerts see a zero rather than no series.
func (m *metrics) addRun(run string) {
	if m == nil {
		return
	}
	for _, o := range outcomeLabels {
		m.outcomes.WithLabelValues(run, o)
	}
	for _, c := range errorLabels {
		m.errors.WithLabelValues(run, c)
	}
	for _, r := range hedgeLabels {
		m.hedges.WithLabelValues(run, r)
	}
	m.hedgedTokens.WithLabelValues(run)
	m.ttft.WithLabelValues(run)
	m.latency.WithLabelValues(run)
}

// hedged counts a hedge of run that ended with result (none when
// empty: a request here that a hedge elsewhere beat) and the tokens it
// threw away.
func (m *metrics) hedged(run, result string, tokens int64) {
	if m == nil {
		return
	}
	if result != "" {
		m.hedges.WithLabelValues(run, result).Inc()
	}
	if tokens > 0 {
		m.hedgedTokens.WithLabelValues(run).Add(float64(tokens))
	}
}

// request records one request to the backend: its timings when answered
// (f nil), its class when it failed. A request ended by the worker's own
// context says nothing about the backend and is not counted.
func (m *metrics) request(run string, c *openai.Completion, f *policy.Failure) {
	if m == nil {
		return
	}
	if f == nil {
		if c != nil {
			m.ttft.WithLabelValues(run).Observe(c.TTFT.Seconds())
			m.latency.WithLabelValues(run).Observe(c.Latency.Seconds())
		}
		return
	}
	if class := errorClass(f); class != "" {
		m.errors.WithLabelValues(run, class).Inc()
	}
}

// errorClass is the failure's class label ("" for none).
func errorClass(f *policy.Failure) string {
	switch f.Fault {
	case policy.ServerFault:
		return ErrorServer
	case policy.Misconfigured:
		return ErrorMisconfigured
	case policy.Answered:
		if f.Class == openai.Permanent {
			return ErrorBadRequest
		}
		return ErrorOverloaded
	}
	return ""
}

// settled counts a delivery of run settled with outcome o.
func (m *metrics) settled(run, o string) {
	if m == nil {
		return
	}
	m.outcomes.WithLabelValues(run, o).Inc()
}

// completedOutcome is the outcome of a stored answer: truncated when its
// last turn stopped at max_tokens.
func completedOutcome(j *job) string {
	if j.truncated() {
		return OutcomeTruncated
	}
	return OutcomeCompleted
}

// deadLetterOutcome is the outcome of a dead letter with reason.
func deadLetterOutcome(reason string) string {
	if reason == schema.ReasonTruncated {
		return OutcomeTruncated
	}
	return OutcomePermanent
}

package aggregator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// lagTimeout bounds the NATS requests a scrape makes for the consumers'
// lag: a scrape of an aggregator cut off from NATS answers without them
// rather than hanging.
const lagTimeout = 2 * time.Second

// Consumer label values of aerie_run_consumer_lag_messages.
const (
	// LagWorkers is the run's workers consumer on the prompts stream:
	// prompts not yet delivered plus those delivered and not settled
	// (NumPending + NumAckPending), the work left to the workers.
	LagWorkers = "workers"
	// LagResults is the aggregator's consumer on the results stream:
	// answers stored by workers and not yet written to completions.jsonl
	// (NumPending + NumAckPending).
	LagResults = "results"
)

var phases = []schema.Phase{schema.PhaseWaiting, schema.PhaseRampUp, schema.PhaseSteady, schema.PhaseDraining, schema.PhaseDone}

// metrics are an aggregator's Prometheus metrics, every one labelled with
// its run. A nil *metrics records nothing: an aggregator without
// Config.Metrics.
type metrics struct {
	lines        *prometheus.CounterVec
	writeErrors  prometheus.Counter
	outputTokens prometheus.Counter
}

// registerMetrics registers a's metrics with reg: the counters of what it
// writes, and a collector that reads the run's state at scrape time.
func (a *Aggregator) registerMetrics(reg prometheus.Registerer) error {
	labels := prometheus.Labels{"run": a.cfg.Run}
	m := &metrics{
		lines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "aerie_aggregator_lines_written_total",
			Help:        "Lines this aggregator appended to the run's output files, by file: completions or failed.",
			ConstLabels: labels,
		}, []string{"file"}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "aerie_aggregator_write_errors_total",
			Help:        "Batches this aggregator could not write to the run's files (a full disk, say); they are retried and not acknowledged meanwhile.",
			ConstLabels: labels,
		}),
		outputTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "aerie_run_output_tokens_total",
			Help:        "Completion tokens of the answers this aggregator wrote to completions.jsonl, reasoning included (lines written before it started are not counted).",
			ConstLabels: labels,
		}),
	}
	m.lines.WithLabelValues("completions")
	m.lines.WithLabelValues("failed")
	for _, c := range []prometheus.Collector{m.lines, m.writeErrors, m.outputTokens, newRunCollector(a, labels)} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("aggregator: register metrics: %w", err)
		}
	}
	a.metrics = m
	return nil
}

// wroteCompletions counts answers appended to completions.jsonl.
func (m *metrics) wroteCompletions(answers []throughput.Answer) {
	if m == nil || len(answers) == 0 {
		return
	}
	m.lines.WithLabelValues("completions").Add(float64(len(answers)))
	var tokens int
	for _, a := range answers {
		for _, q := range a.Requests {
			tokens += q.CompletionTokens
		}
	}
	m.outputTokens.Add(float64(tokens))
}

// wroteFailed counts lines appended to failed.jsonl.
func (m *metrics) wroteFailed(n int) {
	if m == nil || n == 0 {
		return
	}
	m.lines.WithLabelValues("failed").Add(float64(n))
}

// writeFailed counts a batch that could not be written.
func (m *metrics) writeFailed() {
	if m == nil {
		return
	}
	m.writeErrors.Inc()
}

// runCollector reads, at scrape time, the run's state from the latest
// throughput event, the consumers' lag from NATS and the data
// directory's free space.
type runCollector struct {
	a *Aggregator

	expected, completed, failed, truncated, failedBy *prometheus.Desc
	inFlight, workers, paused, writeFailing          *prometheus.Desc
	unwritten                                        *prometheus.Desc
	reqRate, tokRate, eta, etaLow, etaHigh, phase    *prometheus.Desc
	lag, free, size                                  *prometheus.Desc
	waitingForSlots, priority                        *prometheus.Desc
}

func newRunCollector(a *Aggregator, labels prometheus.Labels) *runCollector {
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	return &runCollector{
		a:               a,
		expected:        desc("aerie_run_expected_prompts", "Output lines the run expects: prompts times samples."),
		completed:       desc("aerie_run_completed_prompts", "Lines in completions.jsonl, those written before this aggregator started included."),
		failed:          desc("aerie_run_failed_prompts", "Lines in failed.jsonl (dead letters); falls when a replay queues them again."),
		failedBy:        desc("aerie_run_failed_prompts_by_reason", "Lines in failed.jsonl by reason class.", "reason"),
		truncated:       desc("aerie_run_truncated_prompts", "Completions whose answer stopped at max_tokens."),
		inFlight:        desc("aerie_run_in_flight_prompts", "Prompts held by the live workers, from their heartbeats."),
		workers:         desc("aerie_run_workers", "Workers heard from recently."),
		paused:          desc("aerie_run_paused_workers", "Live workers that have stopped pulling (backend down, or stopping)."),
		writeFailing:    desc("aerie_run_write_failing", "1 while the aggregator cannot write the run's output (results are not acknowledged until it can), 0 otherwise."),
		unwritten:       desc("aerie_run_unwritten_lines", "Lines the run lacks that nothing will bring (nothing queued, in flight or waiting to be written): another --data-dir, deleted files or lost prompts; 0 otherwise."),
		reqRate:         desc("aerie_run_requests_per_second", "Completed requests per second over the last minute."),
		tokRate:         desc("aerie_run_output_tokens_per_second", "Completion tokens streamed per second over the last minute, from the workers' heartbeats."),
		eta:             desc("aerie_run_eta_seconds", "Estimated time until every prompt has its outcome; absent while there is too little to estimate from."),
		etaLow:          desc("aerie_run_eta_low_seconds", "Low end of the ETA's uncertainty band; absent while unknown."),
		etaHigh:         desc("aerie_run_eta_high_seconds", "High end of the ETA's uncertainty band; absent while unknown."),
		phase:           desc("aerie_run_phase", "1 for the run's current phase (waiting, ramp-up, steady, draining, done), 0 for the others.", "phase"),
		lag:             desc("aerie_run_consumer_lag_messages", "Messages a consumer has yet to settle (NumPending + NumAckPending): consumer=workers is the prompts left to the workers, consumer=results the answers stored and not yet written by the aggregator.", "consumer"),
		free:            desc("aerie_data_dir_free_bytes", "Space available to the aggregator on the file system of the run's output directory."),
		size:            desc("aerie_data_dir_size_bytes", "Size of the file system of the run's output directory."),
		waitingForSlots: desc("aerie_run_waiting_for_slots", "1 while the run has prompts queued and live workers, none of which holds any of them: workers serving several runs give their slots to others; 0 otherwise."),
		priority:        desc("aerie_run_priority", "The run's priority (aerie runs set): workers serving several runs give their slots to the highest first."),
	}
}

func (c *runCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.expected, c.completed, c.failed, c.failedBy, c.truncated, c.inFlight, c.workers, c.paused,
		c.writeFailing, c.unwritten, c.reqRate, c.tokRate, c.eta, c.etaLow, c.etaHigh, c.phase, c.lag, c.free, c.size, c.waitingForSlots, c.priority} {
		ch <- d
	}
}

func (c *runCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	var lagWG sync.WaitGroup
	lags := make([]struct {
		n   uint64
		err error
	}, 2)
	for i, which := range []string{LagWorkers, LagResults} {
		lagWG.Add(1)
		go func() {
			defer lagWG.Done()
			lags[i].n, lags[i].err = c.a.lag(which)
		}()
	}

	if s := c.a.Last(); s.Run != "" { // after the first event
		gauge(c.expected, float64(s.Total))
		gauge(c.completed, float64(s.Completed))
		gauge(c.failed, float64(s.Failed))
		gauge(c.truncated, float64(s.Truncated))
		for reason, n := range s.FailedByReason {
			gauge(c.failedBy, float64(n), reason)
		}
		gauge(c.inFlight, float64(s.InFlight))
		gauge(c.workers, float64(s.Workers))
		gauge(c.paused, float64(len(s.PausedWorkers)))
		gauge(c.writeFailing, boolValue(s.WriteError != ""))
		gauge(c.unwritten, float64(s.Unwritten))
		gauge(c.reqRate, s.RequestsPerSec)
		gauge(c.tokRate, s.TokensPerSec)
		if s.ETASec >= 0 {
			gauge(c.eta, s.ETASec)
			// A band that does not hold the ETA is one the estimator
			// did not compute.
			if s.ETALowSec >= 0 && s.ETALowSec <= s.ETASec && s.ETAHighSec >= s.ETASec {
				gauge(c.etaLow, s.ETALowSec)
				gauge(c.etaHigh, s.ETAHighSec)
			}
		}
		for _, p := range phases {
			gauge(c.phase, boolValue(s.Phase == p), string(p))
		}
		gauge(c.waitingForSlots, boolValue(s.WaitingForSlots))
		gauge(c.priority, float64(s.Priority))
	}

	dir := c.a.dir
	if _, err := os.Stat(dir); err != nil {
		dir = c.a.cfg.DataDir // not made yet
	}
	if free, size, err := diskSpace(dir); err == nil {
		gauge(c.free, float64(free))
		gauge(c.size, float64(size))
	}

	lagWG.Wait()
	for i, which := range []string{LagWorkers, LagResults} {
		if lags[i].err == nil {
			gauge(c.lag, float64(lags[i].n), which)
		} else {
			c.a.log.Debug("metrics: cannot read a consumer's lag", "consumer", which, "err", lags[i].err)
		}
	}
}

// lag is NumPending + NumAckPending of the run's workers consumer or of
// the aggregator's results consumer (see LagWorkers, LagResults).
func (a *Aggregator) lag(which string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	stream, durable := schema.PromptsStream, schema.WorkersConsumer(a.cfg.Run)
	if which == LagResults {
		stream, durable = schema.ResultsStream, schema.ResultsConsumer(a.cfg.Run)
	}
	cons, err := a.js.Consumer(ctx, stream, durable)
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, nil // nothing queued yet
		}
		return 0, err
	}
	info := cons.CachedInfo()
	return info.NumPending + uint64(info.NumAckPending), nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

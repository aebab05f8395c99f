package simulator

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// engineLabel is the engine label of every vLLM metric: one engine.
const engineLabel = "0"

// collector exposes the engine's state under vLLM's metric names, read
// at scrape time. Every vLLM metric has vLLM's labels: model_name, the
// name served at scrape time (it changes through /admin/model), and
// engine, always "0" (vLLM numbers its data-parallel engines). The
// simulator's own aerie_sim_faults_injected_total{kind} counts injected
// faults by kind (the labels of faultLabels), every kind listed from
// the start.
type collector struct {
	eng    *engine
	counts *faultCounts
	model  func() string // the served model's name

	running, waiting, kvUsage  *prometheus.Desc
	waitingByReason            *prometheus.Desc
	preemptions, genTokens     *prometheus.Desc
	promptTokens, successTotal *prometheus.Desc
	prefixQueries, prefixHits  *prometheus.Desc
	ttft                       *prometheus.Desc
	faultsInjected             *prometheus.Desc
}

func newCollector(eng *engine, counts *faultCounts, model func() string, n metricNames) *collector {
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		if name == "" {
			return nil // a series this engine does not have
		}
		return prometheus.NewDesc(name, help, append([]string{"model_name", "engine"}, variable...), nil)
	}
	return &collector{
		eng:     eng,
		counts:  counts,
		model:   model,
		running: desc(n.running, "Number of requests in model execution batches."),
		waiting: desc(n.waiting, "Number of requests waiting to be processed."),
		waitingByReason: desc(n.waitingByReason,
			"Number of waiting requests by reason. 'capacity' waits for scheduling capacity; 'deferred' for transient constraints.", "reason"),
		kvUsage:       desc(n.kvUsage, "KV-cache usage. 1 means 100 percent usage."),
		preemptions:   desc(n.preemptions, "Cumulative number of preemption from the engine."),
		genTokens:     desc(n.genTokens, "Number of generation tokens processed."),
		promptTokens:  desc(n.promptTokens, "Number of prefill tokens processed."),
		prefixQueries: desc(n.prefixQueries, "Prompt tokens looked up in the prefix cache."),
		prefixHits:    desc(n.prefixHits, "Prompt tokens found in the prefix cache, which were not prefilled again."),
		successTotal:  desc(n.successTotal, "Count of successfully processed requests.", "finished_reason"),
		ttft:          desc(n.ttft, "Histogram of time to first token in seconds."),
		faultsInjected: prometheus.NewDesc("aerie_sim_faults_injected_total",
			"Faults injected by the simulator, by kind.", []string{"kind"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.waitingByReason, c.kvUsage, c.preemptions, c.genTokens, c.promptTokens, c.prefixQueries, c.prefixHits, c.successTotal, c.ttft, c.faultsInjected} {
		if d != nil {
			ch <- d
		}
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st, byReason := c.eng.snapshot()
	model := c.model()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		if d != nil {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{model, engineLabel}, labels...)...)
		}
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		if d != nil {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{model, engineLabel}, labels...)...)
		}
	}
	gauge(c.running, float64(st.Running))
	gauge(c.waiting, float64(st.Waiting))
	// Every waiting request here waits for a slot or KV room.
	gauge(c.waitingByReason, float64(st.Waiting), "capacity")
	gauge(c.waitingByReason, 0, "deferred")
	gauge(c.kvUsage, st.KVCacheUsage)
	counter(c.preemptions, float64(st.Preemptions))
	counter(c.genTokens, float64(st.GenerationTokens))
	counter(c.promptTokens, float64(st.PromptTokens))
	counter(c.prefixQueries, float64(st.PrefixQueries))
	counter(c.prefixHits, float64(st.PrefixHits))
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		counter(c.successTotal, float64(byReason[r]), r)
	}
	if c.ttft != nil {
		count, sum, buckets := c.eng.ttftSnapshot()
		ch <- prometheus.MustNewConstHistogram(c.ttft, count, sum, buckets, model, engineLabel)
	}
	for k := faultNone + 1; k < numFaultKinds; k++ {
		ch <- prometheus.MustNewConstMetric(c.faultsInjected, prometheus.CounterValue, float64(c.counts[k].Load()), faultLabels[k])
	}
}

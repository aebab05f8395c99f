package worker

import "github.com/prometheus/client_golang/prometheus"

// stateCollector reads a worker's state at scrape time, through its
// reporter: what it holds, what it has streamed, and its breaker, for
// each run it serves.
type stateCollector struct {
	r *reporter
	// run is the worker's one run (Config.Run), whose series are there
	// before its manifest is: "" for a worker of several.
	run                                  string
	inFlight, generating, window, tokens *prometheus.Desc
	breakerOpen, pausedSeconds           *prometheus.Desc
	tailHold, consumerFull, storeFull    *prometheus.Desc
	diskFull                             *prometheus.Desc
	pulling                              *prometheus.Desc
}

func newStateCollector(r *reporter, run string, labels prometheus.Labels) *stateCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"run"}, labels)
	}
	return &stateCollector{
		r:             r,
		run:           run,
		inFlight:      desc("aerie_worker_prompts_in_flight", "The run's prompts delivered to the worker and not yet settled."),
		generating:    desc("aerie_worker_requests_generating", "Requests at the backend now, for every run the worker serves (never more than the window)."),
		window:        desc("aerie_worker_window_size", "The most requests the worker may have at its backend at once now, for every run it serves: --window, or what --window auto has set it to."),
		tokens:        desc("aerie_worker_streamed_tokens_total", "The run's completion tokens streamed from the backend, those of requests that later failed included."),
		breakerOpen:   desc("aerie_worker_breaker_open", "1 while the worker's circuit breaker is open (backend down or refusing the run: no pulls, probing), 0 while closed."),
		pausedSeconds: desc("aerie_worker_paused_seconds_total", "Time the worker's circuit breaker has been open."),
		tailHold:      desc("aerie_worker_tail_hold", "1 while the worker takes no new prompt of the run because, near the end of the run, the other workers would finish the prompts left sooner; 0 otherwise."),
		storeFull:     desc("aerie_worker_store_full", "1 while the JetStream store has no room for the worker's results: it pulls nothing and keeps the answers it holds until they are stored; 0 otherwise."),
		diskFull:      desc("aerie_worker_disk_full", "1 while the disk a hidden-states run's files go to (its output directory, or the server's) has no room for the next sample: the worker pulls nothing, keeps the samples it holds without spending their attempts, and resumes by itself once there is room; 0 otherwise."),
		pulling:       desc("aerie_worker_pulling", "1 while the worker pulls the run's prompts; 0 while it is paused (stopping, the JetStream store full, its backend down, the run paused or deleted) or holds back from them (near the end of the run for faster workers, or from length hints too long for its server)."),
		consumerFull:  desc("aerie_worker_consumer_full", "1 from when the run's consumer is found with as many prompts delivered and unsettled as its MaxAckPending, prompts waiting and this worker's slots free (no worker gets more until some are settled), until it is seen with room; 0 otherwise."),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.generating, c.window, c.tokens, c.breakerOpen, c.pausedSeconds, c.tailHold, c.consumerFull, c.storeFull, c.diskFull, c.pulling} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	h := r.pauses.worker()
	generating, window, paused := float64(r.requests.generating.Load()), float64(r.slots.Capacity()), r.pauses.breaker.pausedFor().Seconds()
	lanes := r.runs.serving()
	waiting := len(lanes) == 0 && c.run != ""
	if waiting {
		// Waiting for the run's manifest: its series are there, at zero.
		lanes = []*lane{{run: c.run}}
	}
	for _, l := range lanes {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l.run)
		}
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l.run)
		}
		gauge(c.inFlight, float64(l.n.held.Load()))
		gauge(c.generating, generating)
		gauge(c.window, window)
		counter(c.tokens, float64(l.n.tokens.Load()))
		gauge(c.breakerOpen, boolValue(h.Breaker != ""))
		counter(c.pausedSeconds, paused)
		gauge(c.tailHold, boolValue(l.tailHold.Load()))
		gauge(c.consumerFull, boolValue(l.consumerFull.Load()))
		gauge(c.storeFull, boolValue(h.StoreFull))
		gauge(c.diskFull, boolValue(h.DiskFull != ""))
		gauge(c.pulling, boolValue(!waiting && h.With(l.holds()).Pause().Pulls))
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

package main_test

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/metrics/metricstest"
)

// aerie work and aerie aggregate serve their metrics with
// --metrics-listen; they stay up after the run, so a scrape before
// produce and one after the run show what moved.
func TestMetricsListenWorkAggregate(t *testing.T) {
	bin := buildAerie(t)
	const n = 60
	dir := t.TempDir()
	natsAddr, simAddr, workAddr, aggAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	natsURL := "nats://" + natsAddr
	data := filepath.Join(dir, "data")
	prompts := filepath.Join(dir, "prompts.jsonl")
	run := "metrics"
	aerie(t, bin, "gen-prompts", "--count", strconv.Itoa(n), "--out", prompts).wait(t, time.Minute)
	start(t, bin, "server", "--listen", natsAddr, "--store", filepath.Join(data, "nats"))
	start(t, bin, "sim", "--listen", simAddr, "--speed", "2000", "--output-median", "100")
	waitTCP(t, natsAddr)
	waitTCP(t, simAddr)
	start(t, bin, "work", "--nats", natsURL, "--run", run, "--backend", "http://"+simAddr, "--window", "20", "--name", "w1", "--metrics-listen", workAddr)
	start(t, bin, "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--event-interval", "100ms", "--metrics-listen", aggAddr)
	workURL, aggURL := "http://"+workAddr+"/metrics", "http://"+aggAddr+"/metrics"

	var before metricstest.Families
	brokertest.Eventually(t, 30*time.Second, func() bool {
		var err error
		before, err = metricstest.Scrape(workURL)
		// The server listens before the worker has connected to NATS
		// and registered its metrics.
		return err == nil && before["aerie_worker_window_size"] != nil
	}, "the worker's metrics at %s", workURL)
	if v, ok := before.Sum("aerie_worker_outcomes_total", "worker", "w1", "run", run, "outcome", "completed"); !ok || v != 0 {
		t.Errorf("before produce: completed outcomes %v (present %v), want a zero series", v, ok)
	}

	aerie(t, bin, "produce", "--nats", natsURL, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5", "--max-tokens", "4096").wait(t, 2*time.Minute)
	brokertest.Eventually(t, 2*time.Minute, func() bool {
		f, err := metricstest.Scrape(aggURL)
		if err != nil {
			return false
		}
		done, _ := f.Sum("aerie_run_phase", "run", run, "phase", "done")
		return done == 1
	}, "the aggregator's metrics to say the run is done")

	agg, err := metricstest.Scrape(aggURL)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := agg.Sum("aerie_run_completed_prompts", "run", run); v != n {
		t.Errorf("aerie_run_completed_prompts = %v, want %d", v, n)
	}
	if v, _ := agg.Sum("aerie_aggregator_lines_written_total", "run", run, "file", "completions"); v != n {
		t.Errorf("lines written to completions = %v, want %d", v, n)
	}
	if v, _ := agg.Sum("aerie_run_consumer_lag_messages", "run", run, "consumer", "workers"); v != 0 {
		t.Errorf("workers' consumer lag = %v after the run, want 0", v)
	}
	if _, ok := agg.Sum("aerie_data_dir_free_bytes", "run", run); !ok {
		t.Error("no aerie_data_dir_free_bytes")
	}
	work, err := metricstest.Scrape(workURL)
	if err != nil {
		t.Fatal(err)
	}
	done, _ := work.Sum("aerie_worker_outcomes_total", "worker", "w1", "outcome", "completed")
	trunc, _ := work.Sum("aerie_worker_outcomes_total", "worker", "w1", "outcome", "truncated")
	if done+trunc != n {
		t.Errorf("worker outcomes completed %v + truncated %v, want %d", done, trunc, n)
	}
	if v, _ := work.Sum("aerie_worker_request_duration_seconds", "worker", "w1"); v < n {
		t.Errorf("request duration histogram counts %v requests, want at least %d", v, n)
	}
	if v, _ := work.Sum("aerie_worker_streamed_tokens_total", "worker", "w1"); v <= 0 {
		t.Errorf("streamed tokens %v, want > 0", v)
	}
	if v, _ := work.Sum("aerie_worker_window_size", "worker", "w1"); v != 20 {
		t.Errorf("window size %v, want 20", v)
	}
}

// aerie run --metrics-listen serves the workers' and the aggregator's
// metrics on one port while the run goes.
func TestMetricsListenRun(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "300", "--out", prompts).wait(t, time.Minute)
	addr := freeAddr(t)
	p := aerie(t, bin, "run", "--run", "m", "--prompts", prompts, "--data-dir", filepath.Join(dir, "data"),
		"--sim-speed", "200", "--workers", "2", "--event-interval", "100ms", "--metrics-listen", addr)
	url := "http://" + addr + "/metrics"
	brokertest.Eventually(t, 2*time.Minute, func() bool {
		f, err := metricstest.Scrape(url)
		if err != nil {
			return false
		}
		windows := len(f["aerie_worker_window_size"].GetMetric())
		_, agg := f.Sum("aerie_run_expected_prompts", "run", "m")
		return windows == 2 && agg
	}, "both workers' and the aggregator's metrics at %s", url)
	p.wait(t, 5*time.Minute)
}

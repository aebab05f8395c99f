package pipeline_test

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/metrics/metricstest"
	"github.com/aerie-dev/aerie/pipeline"
)

// urlLog finds the metrics URL in the log: the line `serving metrics`.
type urlLog struct {
	mu  sync.Mutex
	url string
}

var servingMetrics = regexp.MustCompile(`msg="serving metrics" url=(\S+)`)

func (l *urlLog) Write(p []byte) (int, error) {
	if m := servingMetrics.FindSubmatch(p); m != nil {
		l.mu.Lock()
		l.url = string(m[1])
		l.mu.Unlock()
	}
	return len(p), nil
}

func (l *urlLog) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.url
}

// One listener serves the metrics of both workers and of the aggregator
// while the run goes, and they move: completions rise between two
// scrapes, tokens stream, the latency histograms fill.
func TestMetricsDuringRun(t *testing.T) {
	const n = 300
	cfg := config(t, "metrics", promptsFile(t, n))
	cfg.Sim.Speed = 200 // long enough to scrape twice
	cfg.MetricsListen = "127.0.0.1:0"
	ul := &urlLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(ul, nil))
	done := make(chan error, 1)
	go func() {
		_, err := pipeline.Run(context.Background(), cfg)
		done <- err
	}()
	brokertest.Eventually(t, 30*time.Second, func() bool { return ul.get() != "" }, "the metrics URL in the log")
	url := ul.get()

	var first metricstest.Families
	var c1 float64
	brokertest.Eventually(t, 60*time.Second, func() bool {
		f, err := metricstest.Scrape(url)
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		c, _ := f.Sum("aerie_run_completed_prompts", "run", "metrics")
		first, c1 = f, c
		return c > 0
	}, "some prompts completed")
	if c1 >= n {
		t.Fatalf("the run finished before a second scrape could see it move (%v completed)", c1)
	}
	var second metricstest.Families
	brokertest.Eventually(t, 60*time.Second, func() bool {
		f, err := metricstest.Scrape(url)
		if err != nil {
			t.Fatalf("second scrape (did the run end?): %v", err)
		}
		second = f
		c, _ := f.Sum("aerie_run_completed_prompts", "run", "metrics")
		// A worker counts a prompt once its ack is confirmed, which
		// may be after the aggregator has written its result.
		w, _ := f.Sum("aerie_worker_outcomes_total", "outcome", "completed")
		return c > c1 && w > 0
	}, "completions to rise past %v", c1)

	names, err := os.ReadFile("../metrics/names.txt")
	if err != nil {
		t.Fatal(err)
	}
	// Present in any scrape: every family but those that need a failure or
	// an estimate to exist.
	optional := map[string]bool{"aerie_run_failed_prompts_by_reason": true, "aerie_run_eta_seconds": true,
		"aerie_run_eta_low_seconds": true, "aerie_run_eta_high_seconds": true}
	for name := range strings.Lines(string(names)) {
		name = strings.TrimSpace(name)
		if name == "" || strings.HasPrefix(name, "#") || optional[name] {
			continue
		}
		if _, ok := second[name]; !ok {
			t.Errorf("scrape has no %s", name)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := second[name]; !ok {
			t.Errorf("scrape has no %s: the Go and process collectors are missing", name)
		}
	}
	workers := map[string]bool{}
	for _, m := range second["aerie_worker_window_size"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "worker" {
				workers[l.GetValue()] = true
			}
		}
	}
	if len(workers) != cfg.Workers {
		t.Errorf("window size of workers %v, want %d workers", workers, cfg.Workers)
	}
	positive := []string{"aerie_worker_streamed_tokens_total", "aerie_worker_time_to_first_token_seconds",
		"aerie_worker_request_duration_seconds", "aerie_run_output_tokens_total", "aerie_data_dir_free_bytes"}
	for _, name := range positive {
		if v, _ := second.Sum(name); v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if v, _ := second.Sum("aerie_worker_outcomes_total", "outcome", "completed"); v <= 0 {
		t.Errorf("aerie_worker_outcomes_total{outcome=completed} = %v, want > 0", v)
	}
	if v, _ := second.Sum("aerie_aggregator_lines_written_total", "file", "completions"); v <= 0 {
		t.Errorf("aerie_aggregator_lines_written_total{file=completions} = %v, want > 0", v)
	}
	t1, _ := first.Sum("aerie_worker_streamed_tokens_total")
	t2, _ := second.Sum("aerie_worker_streamed_tokens_total")
	if t2 < t1 {
		t.Errorf("streamed tokens went down between scrapes: %v then %v", t1, t2)
	}
	if v, ok := second.Sum("aerie_run_phase"); !ok || v != 1 {
		t.Errorf("aerie_run_phase sums to %v, want exactly one phase at 1", v)
	}
	if v, _ := second.Sum("aerie_run_expected_prompts"); v != n {
		t.Errorf("aerie_run_expected_prompts = %v, want %d", v, n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

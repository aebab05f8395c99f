package aggregator_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/metrics/metricstest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// The run's metrics follow its events; the lines written, their tokens,
// the consumers' lag and the data directory's space are there too.
func TestMetricsOfARun(t *testing.T) {
	const n = 10
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := provision.WorkersConsumer(ctx, js, run, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	brokertest.Queue(t, js, schema.Manifest{Run: run}, brokertest.Prompts(n))
	d := &schema.DeadLetter{Run: run, ID: "p0009", Reason: schema.ReasonPermanent, Attempts: 1}
	data, _ := schema.EncodeDeadLetter(d)
	if _, err := js.Publish(ctx, schema.DeadSubject(run, schema.Unit{ID: "p0009"}), data); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, _ := start(t, js, aggregator.Config{DataDir: t.TempDir(), Metrics: reg})
	publishResults(t, js, ids(0, 6))
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l := a.Last()
		return l.Completed == 6 && l.Failed == 1
	}, "6 completed and 1 failed in the events")

	f := metricstest.Gather(t, reg)
	for name, want := range map[string]float64{
		"aerie_run_expected_prompts":          n,
		"aerie_run_completed_prompts":         6,
		"aerie_run_failed_prompts":            1,
		"aerie_run_truncated_prompts":         0,
		"aerie_run_output_tokens_total":       600, // 100 a result
		"aerie_aggregator_write_errors_total": 0,
	} {
		if got, ok := f.Sum(name, "run", run); !ok || got != want {
			t.Errorf("%s = %v (present: %v), want %v", name, got, ok, want)
		}
	}
	for file, want := range map[string]float64{"completions": 6, "failed": 1} {
		if got, _ := f.Sum("aerie_aggregator_lines_written_total", "file", file); got != want {
			t.Errorf("lines written to %s: %v, want %v", file, got, want)
		}
	}
	if got, _ := f.Sum("aerie_run_phase"); got != 1 {
		t.Errorf("aerie_run_phase sums to %v, want one phase at 1", got)
	}
	// No worker has taken any prompt: all of them wait on the workers'
	// consumer.
	if got, ok := f.Sum("aerie_run_consumer_lag_messages", "consumer", aggregator.LagWorkers); !ok || got != n {
		t.Errorf("workers' lag %v (present: %v), want %d", got, ok, n)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool {
		got, ok := metricstest.Gather(t, reg).Sum("aerie_run_consumer_lag_messages", "consumer", aggregator.LagResults)
		return ok && got == 0
	}, "the results' lag to be 0 once every result is written")
	if got, _ := f.Sum("aerie_data_dir_free_bytes"); got <= 0 {
		t.Errorf("data dir free bytes %v, want > 0", got)
	}
	if free, _ := f.Sum("aerie_data_dir_free_bytes"); free > 0 {
		if size, _ := f.Sum("aerie_data_dir_size_bytes"); size < free {
			t.Errorf("data dir size %v below its free space %v", size, free)
		}
	}
}

// A full disk shows as aerie_run_write_failing and counts write errors.
// Needs root to mount a small tmpfs; skipped otherwise.
func TestMetricsOfAFullDisk(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s): needs root", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	const n = 200
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
	if err := os.MkdirAll(filepath.Join(dir, run), 0o755); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 1<<20-32<<10), 0o644); err != nil && !strings.Contains(err.Error(), "no space") {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, _ := start(t, js, aggregator.Config{DataDir: dir, Batch: 32, Metrics: reg})
	publishResults(t, js, ids(0, n))
	brokertest.Eventually(t, 20*time.Second, func() bool { return a.Last().WriteError != "" }, "the event to report the write error")
	f := metricstest.Gather(t, reg)
	if got, _ := f.Sum("aerie_run_write_failing"); got != 1 {
		t.Errorf("aerie_run_write_failing = %v, want 1", got)
	}
	if got, _ := f.Sum("aerie_aggregator_write_errors_total"); got < 1 {
		t.Errorf("write errors %v, want at least 1", got)
	}
	if free, _ := f.Sum("aerie_data_dir_free_bytes"); free >= 64<<10 {
		t.Errorf("data dir free bytes %v on a full 1 MiB disk", free)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 30*time.Second, func() bool {
		l := a.Last()
		return l.Completed == n && l.WriteError == ""
	}, "every result written once space is back")
	if got, _ := metricstest.Gather(t, reg).Sum("aerie_run_write_failing"); got != 0 {
		t.Errorf("aerie_run_write_failing = %v once writing again, want 0", got)
	}
}

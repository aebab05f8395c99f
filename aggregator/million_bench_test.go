package aggregator_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/dataset/datasettest"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/report"
	"github.com/aerie-dev/aerie/schema"
)

// BenchmarkMillion measures what takes long at the end of a large run,
// on a completions.jsonl of AERIE_BENCH_LINES answers (a million by
// default) of about 10 KB each, the length a reasoning model writes:
//   - a restarted aggregator's time from its start to its first new
//     line, first on the file alone (every line read), then with the
//     line index the first start wrote;
//   - the report's, with the index and without.
//
// With AERIE_BENCH_DROP_CACHES=1 (root only) the kernel's page cache is
// dropped before each measure, so that the file is read from the disk as
// after a machine's restart. It runs once whatever -benchtime says: at
// a million lines the file alone is 10 GB.
func BenchmarkMillion(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("AERIE_BENCH_LINES")); err == nil && v > 0 {
		n = v
	}
	cold := os.Getenv("AERIE_BENCH_DROP_CACHES") == "1"
	dir := b.TempDir()
	path := filepath.Join(dir, run, aggregator.CompletionsFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	size, err := datasettest.WriteLongCompletions(path, n)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d lines, %.1f GB, written in %s", n, float64(size)/1e9, time.Since(began).Round(time.Second))
	_, _, js := brokertest.Provisioned(b)
	brokertest.Queue(b, js, schema.Manifest{Run: run, Total: n + 10}, nil)
	for b.Loop() {
		dropCaches(b, cold)
		whole := firstNewLine(b, js, dir, path, "new-1")
		dropCaches(b, cold)
		indexed := firstNewLine(b, js, dir, path, "new-2")
		dropCaches(b, cold)
		reportIndexed := reportTime(b, dir)
		if err := os.Remove(lineindex.PathOf(path)); err != nil {
			b.Fatal(err)
		}
		dropCaches(b, cold)
		reportWhole := reportTime(b, dir)
		b.Logf("cold page cache: %v", cold)
		b.Logf("restart to first new line: %.1f s reading every line, %.2f s with the line index", whole.Seconds(), indexed.Seconds())
		b.Logf("report: %.1f s reading every line, %.2f s with the line index", reportWhole.Seconds(), reportIndexed.Seconds())
		b.ReportMetric(indexed.Seconds(), "restart-s")
		b.ReportMetric(whole.Seconds(), "restart-whole-s")
		b.ReportMetric(reportIndexed.Seconds(), "report-s")
		b.ReportMetric(reportWhole.Seconds(), "report-whole-s")
	}
}

// firstNewLine publishes the result of id, starts an aggregator on dir
// and returns how long it took to write its line, path's first new one.
func firstNewLine(b *testing.B, js jetstream.JetStream, dir, path, id string) time.Duration {
	b.Helper()
	before, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	publishResults(b, js, []string{id})
	began := time.Now()
	_, stop := start(b, js, aggregator.Config{DataDir: dir})
	brokertest.Eventually(b, 30*time.Minute, func() bool {
		st, err := os.Stat(path)
		return err == nil && st.Size() > before.Size()
	}, "the restarted aggregator to write %s", id)
	took := time.Since(began)
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	return took
}

func reportTime(b *testing.B, dir string) time.Duration {
	b.Helper()
	began := time.Now()
	r, err := report.Build(report.Options{Run: run, Dir: filepath.Join(dir, run)})
	if err != nil {
		b.Fatal(err)
	}
	if r.Completed == 0 || len(r.Skipped) > 0 {
		b.Fatalf("the report read %d lines, skipped %+v", r.Completed, r.Skipped)
	}
	return time.Since(began)
}

// dropCaches empties the kernel's page cache, when on.
func dropCaches(b *testing.B, on bool) {
	b.Helper()
	if !on {
		return
	}
	syscall.Sync() // only clean pages are dropped
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		b.Fatal(fmt.Errorf("drop the page cache (AERIE_BENCH_DROP_CACHES=1 needs root): %w", err))
	}
}

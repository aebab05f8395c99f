package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker"
)

// TestPeakRSS measures the peak resident set size (ru_maxrss) of one
// `aerie work --window 200`, `aerie aggregate --exit-when-done` and
// `aerie produce`, each its own process, through whole runs of the sizes
// in AERIE_RSS_PROMPTS (comma-separated prompt counts, e.g.
// 25000,1000000), and prints a table of them. Then it starts the
// aggregator again on the finished run, which rebuilds from the files
// everything it keeps of the run ("restart"). It is skipped without
// that variable; `make rss` sets it. AERIE_RSS_BIN measures another
// build of aerie instead of this one's; AERIE_RSS_RESTART_BINS
// (comma-separated) restarts the aggregators of other builds too on the
// finished run, to compare them on the same files.
//
// The backend is `aerie sim` at a speed that makes it almost free, so the
// run costs aerie's own work; the NATS server runs inside the test with a
// one-minute sync interval rather than an fsync per message, which
// changes how fast the run goes but not what each process holds.
func TestPeakRSS(t *testing.T) {
	sizes := os.Getenv("AERIE_RSS_PROMPTS")
	if sizes == "" {
		t.Skip("set AERIE_RSS_PROMPTS (e.g. 25000,1000000) to measure peak RSS; make rss does")
	}
	var ns []int
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			t.Fatalf("AERIE_RSS_PROMPTS=%q: want positive prompt counts separated by commas", sizes)
		}
		ns = append(ns, n)
	}
	bin := os.Getenv("AERIE_RSS_BIN")
	if bin == "" {
		bin = buildAerie(t)
	}
	restartBins := []string{bin}
	if s := os.Getenv("AERIE_RSS_RESTART_BINS"); s != "" {
		restartBins = append(restartBins, strings.Split(s, ",")...)
	}
	var rows []rssRow
	for _, n := range ns {
		r := measureRSS(t, bin, restartBins, n)
		t.Logf("%d prompts: %s", n, r.line())
		rows = append(rows, r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\npeak RSS (MiB) of %s\n", bin)
	for _, r := range rows {
		fmt.Fprintf(&b, "%9d prompts: %s\n", r.n, r.line())
	}
	t.Log(b.String())
}

type rssRow struct {
	n                        int
	work, aggregate, produce float64 // MiB
	restart                  []float64
	restartBins              []string
	wall                     time.Duration
}

func (r rssRow) line() string {
	s := fmt.Sprintf("work --window 200 %.1f, aggregate %.1f, produce %.1f (run %s)", r.work, r.aggregate, r.produce, r.wall.Round(time.Second))
	for i, v := range r.restart {
		s += fmt.Sprintf("; aggregate restarted on the finished run (%s) %.1f", r.restartBins[i], v)
	}
	return s
}

// measureRSS runs n prompts through one worker and one aggregator and
// returns each process's peak RSS.
func measureRSS(t *testing.T, bin string, restartBins []string, n int) rssRow {
	dir := t.TempDir()
	srv, err := broker.Start(broker.Config{StoreDir: filepath.Join(dir, "nats"), Port: -1, SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	natsURL := srv.ClientURL()
	simAddr := freeAddr(t)
	data := filepath.Join(dir, "data")
	prompts := filepath.Join(dir, "prompts.jsonl")
	run := "rss"
	// A budget that grows with the run: about 1,000 prompts a second on
	// two shared cores, with room to spare.
	budget := 5*time.Minute + time.Duration(n)*3*time.Millisecond

	aerie(t, bin, "gen-prompts", "--count", strconv.Itoa(n), "--out", prompts).wait(t, budget)
	sim := start(t, bin, "sim", "--listen", simAddr, "--speed", "100000", "--output-median", "8", "--output-sigma", "0.3", "--max-num-seqs", "256")
	waitTCP(t, simAddr)
	began := time.Now()
	work := start(t, bin, "work", "--nats", natsURL, "--run", run, "--backend", "http://"+simAddr, "--window", "200", "--name", "w", "--grace", "2s")
	agg := aerie(t, bin, "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "2s")
	prod := aerie(t, bin, "produce", "--nats", natsURL, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5", "--max-tokens", "64")
	prod.wait(t, budget)
	agg.wait(t, budget)
	wall := time.Since(began)
	if got := countLines(filepath.Join(data, run, "completions.jsonl")); got != n {
		t.Fatalf("%d prompts: completions.jsonl has %d lines", n, got)
	}
	_ = work.cmd.Process.Signal(syscall.SIGTERM)
	work.wait(t, time.Minute)
	_ = sim.cmd.Process.Signal(syscall.SIGTERM)
	sim.wait(t, time.Minute)
	r := rssRow{n: n, work: maxRSS(work), aggregate: maxRSS(agg), produce: maxRSS(prod), wall: wall, restartBins: restartBins}
	for _, b := range restartBins {
		again := aerie(t, b, "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "2s")
		again.wait(t, budget)
		r.restart = append(r.restart, maxRSS(again))
	}
	return r
}

// maxRSS is an exited process's peak resident set size in MiB (Linux
// reports ru_maxrss in KiB).
func maxRSS(p *proc) float64 {
	ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return float64(ru.Maxrss) / 1024
}

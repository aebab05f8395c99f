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

// TestPeakRSS measures the peak resident set size (VmHWM) of one
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
//
// The peak is each process's VmHWM, read from /proc while it runs, not
// the ru_maxrss its parent gets: Go starts processes with vfork, and
// Linux records the parent's own peak as the child's at exec, so
// ru_maxrss would report this test's memory (the NATS server's) for
// every process it starts.
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
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("peak RSS is read from /proc/PID/status (Linux)")
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
	workPeak := watchPeak(work)
	agg := aerie(t, bin, "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "2s")
	aggPeak := watchPeak(agg)
	prod := aerie(t, bin, "produce", "--nats", natsURL, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5", "--max-tokens", "64")
	prodPeak := watchPeak(prod)
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
	r := rssRow{n: n, work: workPeak(), aggregate: aggPeak(), produce: prodPeak(), wall: wall, restartBins: restartBins}
	for _, b := range restartBins {
		again := aerie(t, b, "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "2s")
		peak := watchPeak(again)
		again.wait(t, budget)
		r.restart = append(r.restart, peak())
	}
	return r
}

// watchPeak reads p's VmHWM (its peak resident set size) every 20ms
// while it runs; the function it returns waits until p has exited and
// returns the last value read, in MiB.
func watchPeak(p *proc) func() float64 {
	status := fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)
	var kib int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			b, err := os.ReadFile(status)
			if err != nil {
				return // gone
			}
			_, hwm, found := strings.Cut(string(b), "VmHWM:")
			if !found {
				return // exited: a zombie has no memory left
			}
			fields := strings.Fields(hwm)
			if len(fields) > 0 {
				if v, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
					kib = v
				}
			}
			<-tick.C
		}
	}()
	return func() float64 {
		<-done
		return float64(kib) / 1024
	}
}

// TestProducePeakRSS measures the peak resident set size (VmHWM) of one
// `aerie produce` of AERIE_RSS_PRODUCE prompts (`aerie gen-prompts`) into
// a NATS server run by the test, the producer alone: what it holds does
// not depend on anything consuming the prompts. Skipped without that
// variable; `make bench` sets it to a million.
func TestProducePeakRSS(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("AERIE_RSS_PRODUCE"))
	if err != nil || n <= 0 {
		t.Skip("set AERIE_RSS_PRODUCE to a prompt count (e.g. 1000000) to measure the producer's peak RSS; make bench does")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("peak RSS is read from /proc/PID/status (Linux)")
	}
	bin := buildAerie(t)
	dir := t.TempDir()
	srv, err := broker.Start(broker.Config{StoreDir: filepath.Join(dir, "nats"), Port: -1, SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	prompts := filepath.Join(dir, "prompts.jsonl")
	budget := 5*time.Minute + time.Duration(n)*time.Millisecond
	aerie(t, bin, "gen-prompts", "--count", strconv.Itoa(n), "--out", prompts).wait(t, budget)
	began := time.Now()
	prod := aerie(t, bin, "produce", "--nats", srv.ClientURL(), "--run", "rss", "--prompts", prompts, "--model", "m", "--max-tokens", "64")
	peak := watchPeak(prod)
	prod.wait(t, budget)
	fmt.Printf("aerie produce of %d prompts: peak RSS %.1f MiB, %s\n", n, peak(), time.Since(began).Round(time.Second))
}

package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/auth"
)

// Workers started with --exit-when-done, two of them, each with the
// worker's own key, say when their run is done and exit 0 once the
// aggregator has written every prompt; a worker started after the end
// exits as soon as it looks. The aggregator, with --exit-when-done too,
// ends with aerie run's summary and writes report.html.
func TestWorkersExitWhenTheRunIsDone(t *testing.T) {
	bin, dir, natsAddr, key := serverWithRoles(t)
	natsURL := "nats://" + natsAddr
	simAddr := freeAddr(t)
	start(t, bin, "sim", "--listen", simAddr, "--speed", "2000", "--output-median", "100")
	waitTCP(t, simAddr)
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "200", "--out", prompts).wait(t, time.Minute)
	data := filepath.Join(dir, "data")
	info := []string{"AERIE_LOG_LEVEL=info"}
	work := func(name string) *proc {
		return startEnv(t, bin, info, "work", "--nats", natsURL, "--nkey", key(auth.Worker), "--run", "done",
			"--backend", "http://"+simAddr, "--name", name, "--grace", "2s", "--exit-when-done")
	}
	w1, w2 := work("w1"), work("w2")
	agg := start(t, bin, "aggregate", "--nats", natsURL, "--nkey", key(auth.Aggregator), "--run", "done", "--data-dir", data,
		"--exit-when-done", "--event-interval", "500ms")
	aerie(t, bin, "produce", "--nats", natsURL, "--nkey", key(auth.Producer), "--run", "done", "--prompts", prompts,
		"--model", "moonshotai/Kimi-K2.5").wait(t, time.Minute)
	agg.wait(t, 3*time.Minute)
	if n := countLines(filepath.Join(data, "done", "completions.jsonl")); n != 200 {
		t.Fatalf("completions.jsonl holds %d lines, want 200", n)
	}
	t.Logf("the aggregator's summary:\n%s", agg.stdout.String())
	// The aggregator ends as aerie run does: a summary, and report.html.
	report := filepath.Join(data, "done", "report.html")
	for _, want := range []string{"run done: done", "200 total, 200 completed", "throughput", "report       " + report} {
		if !strings.Contains(agg.stdout.String(), want) {
			t.Errorf("the aggregator's summary lacks %q:\n%s", want, agg.stdout.String())
		}
	}
	if st, err := os.Stat(report); err != nil || st.Size() == 0 {
		t.Errorf("report.html: %v", err)
	}
	for _, w := range []*proc{w1, w2, work("w3-after-the-end")} {
		if code := w.exit(t, time.Minute); code != 0 {
			t.Errorf("%v: exit %d\n%s", w.cmd.Args, code, w.stderr.String())
			continue
		}
		log := w.stderr.String()
		for _, want := range []string{"run done: every prompt has its answer or its failure written", "completed=200", "stopping: the run is done (--exit-when-done)", "worker stopped"} {
			if !strings.Contains(log, want) {
				t.Errorf("%s's log lacks %q:\n%s", w.cmd.Args[len(w.cmd.Args)-5], want, log)
			}
		}
	}
}

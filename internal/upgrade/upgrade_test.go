//go:build linux

package upgrade_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// runTimeout bounds each run from its produce to its aggregator's exit.
const runTimeout = 5 * time.Minute

// A worker of the release before feature checks, beside one of today's,
// on a --samples 3 run of 1,000 prompts: the run's manifest is of a
// version the release does not read, so it takes none of its prompts
// and says why, whether it serves that run alone (--run: it exits) or
// every run (--all-runs: it skips the run and goes on). Today's worker
// writes all 3,000 answers, each once. Before the manifest named its
// needs, a release without samples in one message answered sample 0 of
// each message it took and dropped the others, without a word.
func TestReleaseWorkerStaysAwayFromASamplesRun(t *testing.T) {
	t.Parallel()
	old, cur := release(t), today(t)
	l := newLab(t, cur, 100, 60)
	file := l.prompts(cur, 1000)
	l.produce(cur, "samples", file, "--samples", "3", "--ack-wait", "10s")
	oldOne := l.worker(old, "old-run", "samples", 100)
	oldAll := l.start(old, "old-all-runs", "work", "--nats", l.natsURL, "--all-runs", "--backend", l.simURL,
		"--name", "old-all-runs", "--window", "100", "--grace", "2s")
	l.worker(cur, "today-1", "samples", 200)
	agg := l.aggregator(cur, "aggregator", "samples")
	if err := agg.wait(runTimeout); err != nil {
		t.Fatalf("aggregator: %v\n%s", err, agg.tail(20))
	}
	byWorker := l.exactlyOnce("samples", 1000, 3)
	if byWorker["old-run"]+byWorker["old-all-runs"] != 0 || byWorker["today-1"] != 3000 {
		t.Errorf("lines by worker %v: want all 3,000 from today-1", byWorker)
	}

	if err := oldOne.wait(time.Minute); err == nil {
		t.Errorf("the release's worker of the run exited 0; want it to refuse the run")
	}
	for _, want := range []string{"manifest", "schema version 2", "upgrade aerie on this host"} {
		if !strings.Contains(oldOne.text(), want) {
			t.Errorf("the release's worker of the run does not say %q:\n%s", want, oldOne.tail(10))
		}
	}
	if oldAll.exited() {
		t.Errorf("the release's worker of every run exited (%s)", oldAll.status())
	}
	for _, want := range []string{"run manifest cannot be read: run skipped", "run=samples", "schema version 2"} {
		if !strings.Contains(oldAll.text(), want) {
			t.Errorf("the release's worker of every run does not say %q:\n%s", want, oldAll.tail(10))
		}
	}
	t.Logf("the release's workers: %q; %q", lastLine(oldOne, "schema version"), lastLine(oldAll, "run skipped"))
}

// Two builds of today's source, the newer with a feature (test-only) the
// older lacks, on a run produced to need it: the older worker names the
// feature and the version that has it in its first heartbeat and every
// one after, and in its log, and takes none of the run's prompts; the
// older aggregator writes nothing and says so in its events, until the
// newer one replaces it. Every prompt is written once.
func TestOlderBuildNamesTheFeatureItLacks(t *testing.T) {
	t.Parallel()
	older, newerBin := today(t), newer(t)
	l := newLab(t, newerBin, 100, 60)
	const run, prompts = "needy", 500
	file := l.prompts(newerBin, prompts)
	l.produce(newerBin, run, file, "--needs", "test-only", "--ack-wait", "10s")
	beats := l.heartbeats(run)
	events := l.events(run)

	olderAgg := l.aggregator(older, "aggregator-older", run)
	olderW := l.worker(older, "older-1", run, 100)
	eventually(t, time.Minute, "the older worker's first heartbeat", func() bool { return len(beats.of("older-1")) > 0 })
	first := beats.of("older-1")[0]
	if !slices.Equal(first.Lacks, []string{"test-only"}) || first.LacksWrittenBy != newerVersion || first.Version != todayVersion || !first.Paused {
		t.Errorf("the older worker's first heartbeat: version %q, lacks %v written by %q, paused %v (%q); want it to name test-only and %s",
			first.Version, first.Lacks, first.LacksWrittenBy, first.Paused, first.PausedReason, newerVersion)
	}
	eventually(t, time.Minute, "the older worker's second heartbeat", func() bool { return len(beats.of("older-1")) >= 2 })
	eventually(t, time.Minute, "the older aggregator's event naming what it lacks", func() bool { return events.lacking("test-only", newerVersion) })
	olderAgg.kill()

	l.worker(newerBin, "newer-1", run, 100)
	agg := l.aggregator(newerBin, "aggregator-newer", run)
	if err := agg.wait(runTimeout); err != nil {
		t.Fatalf("aggregator: %v\n%s", err, agg.tail(20))
	}
	byWorker := l.exactlyOnce(run, prompts, 1)
	if byWorker["older-1"] != 0 {
		t.Errorf("the older worker wrote %d lines", byWorker["older-1"])
	}
	all := beats.of("older-1")
	for _, hb := range all {
		if !slices.Equal(hb.Lacks, []string{"test-only"}) || hb.InFlight != 0 || hb.Completed != 0 {
			t.Errorf("an older worker's heartbeat: lacks %v, in flight %d, completed %d", hb.Lacks, hb.InFlight, hb.Completed)
			break
		}
	}
	for _, p := range []*proc{olderW, olderAgg} {
		for _, want := range []string{"leaving the run alone", "test-only", newerVersion, todayVersion} {
			if !strings.Contains(p.text(), want) {
				t.Errorf("%s does not say %q:\n%s", p.name, want, p.tail(10))
			}
		}
	}
	t.Logf("older worker: %d heartbeats, the first %v after its start: %s", len(all), first.at.Sub(olderW.started).Round(time.Millisecond), first.PausedReason)
}

// A rolling upgrade while a run of 3,000 prompts goes on: the run is
// produced by the release before feature checks (producers are upgraded
// last), and its aggregator and then its three workers, each killed with
// SIGKILL, are replaced one by one by today's build. Every prompt is
// written exactly once, and both builds wrote some.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	old, cur := release(t), today(t)
	l := newLab(t, cur, 12, 120)
	const run, prompts = "rolling", 3000
	file := l.prompts(old, prompts)
	l.produce(old, run, file, "--ack-wait", "5s")
	agg := l.aggregator(old, "aggregator-old", run)
	workers := []*proc{l.worker(old, "w1-old", run, 50), l.worker(old, "w2-old", run, 50), l.worker(old, "w3-old", run, 50)}

	step := func(share float64, what string, do func()) {
		t.Helper()
		eventually(t, runTimeout, fmt.Sprintf("%.0f%% of the run written", 100*share), func() bool {
			return float64(l.written(run)) >= share*prompts
		})
		t.Logf("at %d of %d lines: %s", l.written(run), prompts, what)
		do()
	}
	step(0.1, "aggregator-old killed, aggregator-new started", func() {
		agg.kill()
		agg = l.aggregator(cur, "aggregator-new", run)
	})
	for i := range workers {
		name := fmt.Sprintf("w%d", i+1)
		step(0.25+0.15*float64(i), name+"-old killed, "+name+"-new started", func() {
			workers[i].kill()
			workers[i] = l.worker(cur, name+"-new", run, 50)
		})
	}
	if err := agg.wait(runTimeout); err != nil {
		t.Fatalf("aggregator: %v\n%s", err, agg.tail(20))
	}
	byWorker := l.exactlyOnce(run, prompts, 1)
	oldLines, newLines := 0, 0
	for w, n := range byWorker {
		if strings.HasSuffix(w, "-old") {
			oldLines += n
		} else {
			newLines += n
		}
	}
	if oldLines == 0 || newLines == 0 {
		t.Errorf("lines by worker %v: want both builds to have answered", byWorker)
	}
	t.Logf("lines by worker: %v", byWorker)
	if _, err := os.Stat(filepath.Join(l.data, run, "manifest.json")); err != nil {
		t.Errorf("manifest.json: %v", err)
	}
	m := l.manifest(run)
	if m.V != schema.ManifestVersion1 || len(m.Needs) != 0 {
		t.Errorf("the run's manifest: version %d, needs %v; a run of the release needs nothing", m.V, m.Needs)
	}
}

// lastLine is the last line of p's log that holds s.
func lastLine(p *proc, s string) string {
	lines := strings.Split(p.text(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

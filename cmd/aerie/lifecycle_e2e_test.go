package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
)

// Workers started with --exit-when-done, two of them, each with the
// worker's own key, say when their run is done and exit 0 once the
// aggregator has written every prompt; a worker started after the end
// exits as soon as it looks. The aggregator, with --exit-when-done too,
// ends with aerie run's summary and writes report.html.
func TestWorkersExitWhenTheRunIsDone(t *testing.T) {
	bin, dir, addr, key := serverWithRoles(t)
	natsURL := "nats://" + addr
	simAddr, prompts := simAndPrompts(t, bin, dir, 200, 100)
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

// A second aggregator started with --exit-when-done on a run that is done
// and still held by its first aggregator says so at once and exits 0,
// instead of waiting out the lease.
func TestSecondAggregatorOnAFinishedRun(t *testing.T) {
	bin, dir, addr, key := serverWithRoles(t)
	natsURL := "nats://" + addr
	simAddr, prompts := simAndPrompts(t, bin, dir, 50, 50)
	data := filepath.Join(dir, "data")
	start(t, bin, "work", "--nats", natsURL, "--nkey", key(auth.Worker), "--run", "fin", "--backend", "http://"+simAddr, "--grace", "2s")
	start(t, bin, "aggregate", "--nats", natsURL, "--nkey", key(auth.Aggregator), "--run", "fin", "--data-dir", data, "--event-interval", "200ms")
	aerie(t, bin, "produce", "--nats", natsURL, "--nkey", key(auth.Producer), "--run", "fin", "--prompts", prompts,
		"--model", "moonshotai/Kimi-K2.5").wait(t, time.Minute)

	js := adminJetStream(t, natsURL, key(auth.Admin))
	brokertest.Eventually(t, 2*time.Minute, func() bool {
		ev, err := runs.Done(t.Context(), js, "fin")
		return err == nil && ev != nil
	}, "the run done")

	began := time.Now()
	second := aerie(t, bin, "aggregate", "--nats", natsURL, "--nkey", key(auth.Aggregator), "--run", "fin", "--data-dir", data, "--exit-when-done")
	code := second.exit(t, time.Minute)
	took := time.Since(began)
	if out := second.stdout.String(); code != 0 || !strings.Contains(out, "run fin is done (50 completed, 0 failed of 50) and another aggregator holds it") {
		t.Errorf("second aggregator: exit %d after %v\nstdout: %s\nstderr: %s", code, took, out, second.stderr.String())
	}
	if took > 5*time.Second {
		t.Errorf("the second aggregator took %v to say the run is done", took.Round(time.Millisecond))
	}
	if n := countLines(filepath.Join(data, "fin", "completions.jsonl")); n != 50 {
		t.Errorf("completions.jsonl holds %d lines, want 50", n)
	}
}

// simAndPrompts starts a fast simulator with answers of about median
// tokens and writes n prompts in dir; it returns the simulator's address
// and the prompts file.
func simAndPrompts(t *testing.T, bin, dir string, n, median int) (simAddr, prompts string) {
	t.Helper()
	simAddr = freeAddr(t)
	start(t, bin, "sim", "--listen", simAddr, "--speed", "2000", "--output-median", strconv.Itoa(median))
	waitTCP(t, simAddr)
	prompts = filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", strconv.Itoa(n), "--out", prompts).wait(t, time.Minute)
	return simAddr, prompts
}

// When a worker dies with prompts in hand, the run's other worker says
// which one went silent, how many prompts it held and by when they come
// back, and then that they came back to it; every prompt is written once.
func TestWorkerSaysWhenAPeerDiesAndItsPromptsComeBack(t *testing.T) {
	bin, dir, addr, key := serverWithRoles(t)
	natsURL := "nats://" + addr
	simAddr := freeAddr(t)
	start(t, bin, "sim", "--listen", simAddr, "--speed", "10", "--output-median", "100")
	waitTCP(t, simAddr)
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "300", "--out", prompts).wait(t, time.Minute)
	data := filepath.Join(dir, "data")
	work := func(name string) *proc {
		return startEnv(t, bin, []string{"AERIE_LOG_LEVEL=info"}, "work", "--nats", natsURL, "--nkey", key(auth.Worker), "--run", "peer",
			"--backend", "http://"+simAddr, "--name", name, "--window", "40", "--grace", "2s", "--exit-when-done")
	}
	w1, w2 := work("w1"), work("w2")
	agg := start(t, bin, "aggregate", "--nats", natsURL, "--nkey", key(auth.Aggregator), "--run", "peer", "--data-dir", data,
		"--exit-when-done", "--event-interval", "500ms")
	aerie(t, bin, "produce", "--nats", natsURL, "--nkey", key(auth.Producer), "--run", "peer", "--prompts", prompts,
		"--model", "moonshotai/Kimi-K2.5", "--ack-wait", "15s").wait(t, time.Minute)
	completions := filepath.Join(data, "peer", "completions.jsonl")
	brokertest.Eventually(t, 2*time.Minute, func() bool { return countLines(completions) >= 20 }, "20 prompts written")
	// w1 is killed once w2 has heard of it holding prompts: w2 follows
	// heartbeats before it answers anything, so a heartbeat of w1 stored
	// after one in which w2 has answered has reached w2. (w1 may have
	// pulled only after a heartbeat that said it held none.)
	js := adminJetStream(t, natsURL, key(auth.Admin))
	events, err := js.Stream(t.Context(), schema.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	var w2Working uint64
	brokertest.Eventually(t, time.Minute, func() bool {
		if w2Working == 0 {
			m, err := events.GetLastMsgForSubject(t.Context(), schema.HeartbeatSubject("peer", "w2"))
			var hb schema.Heartbeat
			if err != nil || json.Unmarshal(m.Data, &hb) != nil || hb.Completed == 0 {
				return false
			}
			w2Working = m.Sequence
		}
		m, err := events.GetLastMsgForSubject(t.Context(), schema.HeartbeatSubject("peer", "w1"))
		var hb schema.Heartbeat
		return err == nil && m.Sequence > w2Working && json.Unmarshal(m.Data, &hb) == nil && hb.InFlight > 0
	}, "a heartbeat of w1 holding prompts, after w2 answered")
	w1.kill(t)
	agg.wait(t, 3*time.Minute)
	if code := w2.exit(t, time.Minute); code != 0 {
		t.Fatalf("w2: exit %d\n%s", code, w2.stderr.String())
	}
	lines := readJSONL[turnsLine](t, completions)
	seen := writtenOnce(t, lines)
	if len(seen) != 300 {
		t.Errorf("%d distinct prompts written, want 300", len(seen))
	}
	log := w2.stderr.String()
	t.Logf("w2's log:\n%s", log)
	for _, want := range []string{"a worker of the run went silent: the prompts it held come back after the AckWait", "peer=w1", "ack_wait=15s", "back_by=",
		"prompts delivered before came back to this worker", "silent_workers=w1"} {
		if !strings.Contains(log, want) {
			t.Errorf("w2's log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "peer=w1 last_heard") && strings.Contains(log, "held=0 ") {
		t.Errorf("w2 says w1 held nothing:\n%s", log)
	}
}

// adminJetStream connects to natsURL with the admin seed, for a test to
// look at the server's state.
func adminJetStream(t *testing.T, natsURL, seed string) jetstream.JetStream {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	_, js := brokertest.ConnectURL(t, natsURL, opt, nats.CustomInboxPrefix(auth.InboxPrefix(auth.Admin)))
	return js
}

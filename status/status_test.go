package status_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/status"
	"github.com/aerie-dev/aerie/worker"
)

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// goRun runs fn until the test ends or the returned stop is called;
// stop waits for it to return.
func goRun(t *testing.T, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stopped with %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func startAggregator(t *testing.T, js jetstream.JetStream, run, dir string) (*aggregator.Aggregator, func()) {
	t.Helper()
	a, err := aggregator.New(aggregator.Config{Run: run, DataDir: dir, EventInterval: 50 * time.Millisecond, Logger: quiet}, js)
	if err != nil {
		t.Fatal(err)
	}
	return a, goRun(t, a.Run)
}

func startWorker(t *testing.T, js jetstream.JetStream, run, name, backend string) func() {
	t.Helper()
	client, err := openai.New(openai.Config{BaseURL: backend})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Run: run, Name: name, Window: 8, Heartbeat: 50 * time.Millisecond,
		PullWait: 200 * time.Millisecond, Grace: 100 * time.Millisecond, Logger: quiet}, js, client)
	if err != nil {
		t.Fatal(err)
	}
	return goRun(t, w.Run)
}

// queue queues n prompts for run, for the simulator's model.
func queue(t *testing.T, js jetstream.JetStream, run string, n int) {
	t.Helper()
	if _, err := provision.WorkersConsumer(testContext(t), js, run, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	brokertest.Queue(t, js, schema.Manifest{Run: run, Model: simulator.DefaultModel, Producer: "test-host"}, brokertest.Prompts(n))
}

// A real run, two workers against the simulator, one in ten requests
// refused as too long (a permanent failure): status shows its counts,
// failures by reason and workers as the run goes and once it is done, in
// text and JSON; a worker that stops goes stale; the failures by reason
// are the same after the aggregator restarts; and the list shows every
// run.
func TestStatusOfARealRun(t *testing.T) {
	const run, n = "alpha", 300
	_, _, js := brokertest.Provisioned(t)
	ctx := testContext(t)
	sim := simtest.Serve(t, simulator.Config{Speed: 2000, OutputMedian: 150, MaxNumSeqs: 64,
		Faults: simulator.Faults{Rate400: 0.1}})
	queue(t, js, run, n)
	queue(t, js, "beta", 20)
	queue(t, js, "gamma", 5)
	dir := t.TempDir()
	agg, stopAgg := startAggregator(t, js, run, dir)
	stopA := startWorker(t, js, run, "gpu-a", sim)
	startWorker(t, js, run, "gpu-b", sim)

	brokertest.Eventually(t, time.Minute, func() bool {
		st, err := status.Gather(ctx, js, run, status.Options{})
		return err == nil && st.LiveWorkers == 2 && st.Completed > 0 && st.Event != nil
	}, "a status with both workers live and completions counted")
	select {
	case <-agg.Done():
	case <-ctx.Done():
		t.Fatal("the run did not finish")
	}
	var st *status.Run
	brokertest.Eventually(t, 30*time.Second, func() bool {
		var err error
		st, err = status.Gather(ctx, js, run, status.Options{})
		return err == nil && st.Phase == schema.PhaseDone
	}, "a status of phase done")

	if st.Total != n || st.Completed+st.Failed != n || st.Failed == 0 {
		t.Fatalf("completed %d + failed %d of %d, want all accounted for, some failed", st.Completed, st.Failed, st.Total)
	}
	if want := map[string]int{schema.ReasonPermanent: st.Failed}; !maps.Equal(st.FailedByReason, want) {
		t.Errorf("failed by reason %v, want %v", st.FailedByReason, want)
	}
	if st.InFlight != 0 || st.Queue.Pending != 0 || st.Queue.ResultsToWrite != 0 || st.Queue.FailuresToWrite != 0 {
		t.Errorf("queue %+v, want empty at the end", st.Queue)
	}
	if st.Aggregator == nil || st.Aggregator.PID != os.Getpid() {
		t.Errorf("aggregator %+v, want this process", st.Aggregator)
	}
	host, _ := os.Hostname()
	if len(st.Workers) != 2 {
		t.Fatalf("workers %+v, want gpu-a and gpu-b", st.Workers)
	}
	var completedByWorkers int64
	for i, name := range []string{"gpu-a", "gpu-b"} {
		w := st.Workers[i]
		if w.Name != name || w.Host != host || w.Backend != sim || w.Window != 8 || w.Heartbeat.Stale || w.InFlight != 0 {
			t.Errorf("worker %d: %+v, want %s on %s, backend %s, window 8, live, nothing generating", i, w, name, host, sim)
		}
		completedByWorkers += w.Completed
	}
	if completedByWorkers != int64(st.Completed) {
		t.Errorf("workers completed %d, the run %d", completedByWorkers, st.Completed)
	}

	var text bytes.Buffer
	if err := status.WriteRun(&text, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"phase done", "ETA         done",
		strings.Join([]string{itoa(st.Completed), "/", itoa(n)}, " "),
		"permanent " + itoa(st.Failed),
		"gpu-a", "gpu-b", sim,
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, text.String())
		}
	}

	var js1 bytes.Buffer
	if err := status.Frame(js, run, true, false, status.Options{})(ctx, &js1); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Completed      int            `json:"completed"`
		Total          int            `json:"total"`
		Phase          string         `json:"phase"`
		FailedByReason map[string]int `json:"failed_by_reason"`
		Workers        []struct {
			Name, Host, Backend string
			Heartbeat           struct {
				Stale bool `json:"stale"`
			} `json:"heartbeat"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(js1.Bytes(), &doc); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, js1.String())
	}
	if doc.Phase != "done" || doc.Completed+doc.FailedByReason[schema.ReasonPermanent] != doc.Total || doc.Total != n ||
		len(doc.Workers) != 2 || doc.Workers[0].Host != host {
		t.Errorf("status JSON %+v", doc)
	}

	// A worker that stops sends no more heartbeats: it goes stale.
	stopA()
	brokertest.Eventually(t, 30*time.Second, func() bool {
		st, err := status.Gather(ctx, js, run, status.Options{StaleAfter: 300 * time.Millisecond})
		return err == nil && len(st.Workers) == 2 && st.LiveWorkers == 1 &&
			st.Workers[0].Name == "gpu-b" && !st.Workers[0].Heartbeat.Stale &&
			st.Workers[1].Name == "gpu-a" && st.Workers[1].Heartbeat.Stale
	}, "gpu-a marked stale, gpu-b live")

	// The failures by reason come back from failed.jsonl after a restart.
	stopAgg()
	last, err := status.Gather(ctx, js, run, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := last.Event.At // the stopped aggregator's last event
	_, stopAgg = startAggregator(t, js, run, dir)
	brokertest.Eventually(t, 30*time.Second, func() bool {
		again, err := status.Gather(ctx, js, run, status.Options{})
		return err == nil && again.Event.At.After(before) && again.Phase == schema.PhaseDone &&
			maps.Equal(again.FailedByReason, st.FailedByReason)
	}, "failures by reason %v after the aggregator restarted", st.FailedByReason)
	stopAgg()

	lines, err := status.List(ctx, js, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 || lines[0].Run != run || lines[1].Run != "beta" || lines[2].Run != "gamma" {
		t.Fatalf("list %+v, want alpha, beta, gamma", lines)
	}
	if l := lines[0]; l.Phase != schema.PhaseDone || l.Completed != st.Completed || l.Failed != st.Failed || l.Event == nil {
		t.Errorf("alpha listed as %+v", l)
	}
	if l := lines[1]; l.Total != 20 || l.Event != nil || l.Phase != "" || l.ETASec >= 0 {
		t.Errorf("beta, never aggregated, listed as %+v", l)
	}
	var list bytes.Buffer
	if err := status.WriteList(&list, lines); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"alpha", "beta", "gamma", "0/20", "0/5", "done"} {
		if !strings.Contains(list.String(), want) {
			t.Errorf("list lacks %q:\n%s", want, list.String())
		}
	}
}

func itoa(n int) string {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(n)
	s := strings.TrimSpace(b.String())
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// A run that is not there is an error that says so; a run name that
// cannot be one is refused before any request.
func TestGatherUnknownRun(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	ctx := testContext(t)
	if _, err := status.Gather(ctx, js, "nope", status.Options{}); err == nil || !strings.Contains(err.Error(), "no manifest") {
		t.Errorf("Gather of a missing run: %v", err)
	}
	if _, err := status.Gather(ctx, js, "a.b", status.Options{}); err == nil {
		t.Error("a run name with a dot was accepted")
	}
	lines, err := status.List(ctx, js, status.Options{})
	if err != nil || len(lines) != 0 {
		t.Errorf("List on an empty server: %v, %v", lines, err)
	}
}

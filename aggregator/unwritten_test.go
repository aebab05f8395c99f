package aggregator_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// events collects the throughput events of one aggregator.
type events struct {
	mu  sync.Mutex
	all []schema.Throughput
}

func (e *events) add(s schema.Throughput) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, s)
}

func (e *events) snapshot() []schema.Throughput {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]schema.Throughput(nil), e.all...)
}

// startLogged starts an aggregator of run in dir that logs to log and
// collects its events.
func startLogged(t *testing.T, js jetstream.JetStream, dir string, log *logtest.Buffer, evs *events) (*aggregator.Aggregator, func() error) {
	t.Helper()
	return start(t, js, aggregator.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(log, nil)), OnEvent: evs.add})
}

// An aggregator started for a finished run in a directory that does not
// hold its files (another --data-dir, files deleted) waits for lines
// that nothing will bring. It says so, in its log and its events, with
// how to get the lines back; following that advice writes them all,
// once each. A run whose prompts are merely queued, with no worker yet,
// is not taken for one.
func TestUnwrittenLinesAreNamed(t *testing.T) {
	defer aggregator.SetUnwrittenLook(100 * time.Millisecond)()
	const n = 40
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, brokertest.Prompts(n))
	workers, err := provision.WorkersConsumer(ctx, js, run, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}

	// Prompts queued, no worker: waiting, not unwritten.
	first := t.TempDir()
	var log1 logtest.Buffer
	var ev1 events
	a1, stop1 := startLogged(t, js, first, &log1, &ev1)
	brokertest.Eventually(t, 30*time.Second, func() bool { return len(ev1.snapshot()) >= 20 }, "20 events while the prompts wait")
	for _, s := range ev1.snapshot() {
		if s.Unwritten != 0 {
			t.Fatalf("with %d prompts queued and no worker, an event says %d unwritten", n, s.Unwritten)
		}
	}

	// A worker's part: every prompt answered, its result stored, the
	// prompt acknowledged. The first aggregator writes them and ends.
	batch, err := workers.Fetch(n, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != n {
		t.Fatalf("fetched %d prompts, want %d", got, n)
	}
	publishResults(t, js, ids(0, n))
	select {
	case <-a1.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the first aggregator did not finish the run")
	}
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log1.String(), "nothing will bring them") {
		t.Errorf("the aggregator that wrote the run warned of unwritten lines:\n%s", log1.String())
	}

	// Another directory: nothing will come, and it says so.
	second := t.TempDir()
	var log2 logtest.Buffer
	var ev2 events
	_, stop2 := startLogged(t, js, second, &log2, &ev2)
	brokertest.Eventually(t, 30*time.Second, func() bool {
		evs := ev2.snapshot()
		return len(evs) > 0 && evs[len(evs)-1].Unwritten == n
	}, "an event with %d unwritten", n)
	warning := log2.String()
	for _, want := range []string{
		"40 of its 40 lines are not in " + filepath.Join(second, run),
		"check --data-dir",
		"nats consumer rm AERIE_RESULTS " + schema.ResultsConsumer(run) + " -f",
		"nats consumer rm AERIE_DEAD " + schema.DeadConsumer(run) + " -f",
		"aerie reconcile --run " + run,
	} {
		if !strings.Contains(warning, want) {
			t.Errorf("the warning lacks %q:\n%s", want, warning)
		}
	}
	if c := strings.Count(warning, "nothing will bring them"); c != 1 {
		t.Errorf("warned %d times, want once", c)
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}

	// The advice: remove the aggregator's consumers and start again.
	for stream, name := range map[string]string{schema.ResultsStream: schema.ResultsConsumer(run), schema.DeadStream: schema.DeadConsumer(run)} {
		if err := js.DeleteConsumer(ctx, stream, name); err != nil {
			t.Fatal(err)
		}
	}
	var log3 logtest.Buffer
	var ev3 events
	a3, stop3 := startLogged(t, js, second, &log3, &ev3)
	select {
	case <-a3.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the rebuilt run did not finish:\n%s", log3.String())
	}
	if err := stop3(); err != nil {
		t.Fatal(err)
	}
	writtenOnce(t, readLines(t, filepath.Join(second, run, aggregator.CompletionsFile)), ids(0, n))
	if last := a3.Last(); last.Unwritten != 0 || last.Completed != n {
		t.Errorf("last event after the rebuild: %d unwritten, %d completed; want 0 and %d", last.Unwritten, last.Completed, n)
	}
}

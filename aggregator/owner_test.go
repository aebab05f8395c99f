package aggregator_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// launch runs an aggregator of the test run and returns a channel that
// gets Run's result; the aggregator is stopped when the test ends.
func launch(t *testing.T, js jetstream.JetStream, cfg aggregator.Config) (*aggregator.Aggregator, <-chan error) {
	t.Helper()
	cfg.Run, cfg.Logger = run, quiet
	if cfg.EventInterval == 0 {
		cfg.EventInterval = 50 * time.Millisecond
	}
	a, err := aggregator.New(cfg, js)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		done <- a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(30 * time.Second):
			t.Error("aggregator did not stop")
		}
	})
	return a, done
}

func runResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("aggregator Run did not return")
		return nil
	}
}

// Two aggregators of one run, on the same data directory or on two, never
// both write: the second refuses with a message naming the first, and
// every answer is in completions.jsonl exactly once.
func TestSecondAggregatorIsRefused(t *testing.T) {
	const n = 2000
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
	dir := t.TempDir()
	first, _ := launch(t, js, aggregator.Config{DataDir: dir, Batch: 16})
	brokertest.Eventually(t, 10*time.Second, func() bool { return first.Last().Phase != "" }, "the first aggregator to start")

	publishResults(t, js, ids(0, n/2))
	_, sameDir := launch(t, js, aggregator.Config{DataDir: dir, Batch: 16, LeaseWait: 300 * time.Millisecond})
	otherDir := t.TempDir()
	_, elsewhere := launch(t, js, aggregator.Config{DataDir: otherDir, Batch: 16, LeaseWait: 300 * time.Millisecond})
	publishResults(t, js, ids(n/2, n))

	for name, done := range map[string]<-chan error{"same directory": sameDir, "other directory": elsewhere} {
		err := runResult(t, done)
		var held *aggregator.HeldError
		if !errors.As(err, &held) || !strings.Contains(err.Error(), "pid "+itoa(os.Getpid())) {
			t.Errorf("%s: second aggregator's Run = %v, want a refusal naming this process", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(otherDir, run, aggregator.CompletionsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused aggregator created its output: %v", err)
	}
	brokertest.Eventually(t, 30*time.Second, func() bool { return first.Last().Completed == n }, "the first aggregator to write every answer")
	writtenOnce(t, readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)), ids(0, n))
}

// An aggregator started while the previous one is still stopping (an
// overlapping restart) waits for it, then carries on from its output.
func TestOverlappingRestartWaits(t *testing.T) {
	const n = 100
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
	dir := t.TempDir()
	publishResults(t, js, ids(0, n/2))
	first, stopFirst := start(t, js, aggregator.Config{DataDir: dir})
	brokertest.Eventually(t, 10*time.Second, func() bool { return first.Last().Completed == n/2 }, "the first half written")

	second, done := launch(t, js, aggregator.Config{DataDir: dir, LeaseWait: 20 * time.Second, ExitWhenDone: true})
	if err := stopFirst(); err != nil {
		t.Fatal(err)
	}
	publishResults(t, js, ids(n/2, n))
	if err := runResult(t, done); err != nil {
		t.Fatalf("the restarted aggregator: %v", err)
	}
	if l := second.Last(); l.Phase != schema.PhaseDone || l.Completed != n {
		t.Errorf("last event %+v, want done with %d", l, n)
	}
	if got := readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)); len(got) != n {
		t.Errorf("%d lines, want %d", len(got), n)
	}
}

// The lease of an aggregator of this host that died on this directory (it
// no longer holds the directory's lock) is taken over at once, without
// waiting for it to expire.
func TestDeadAggregatorsLeaseIsTakenOver(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 1}, nil)
	publishResults(t, js, ids(0, 1))
	dir := t.TempDir()
	abs, _ := filepath.Abs(filepath.Join(dir, run))
	host, _ := os.Hostname()
	putLease(t, js, schema.Lease{Holder: host + ":1:dead", Host: host, PID: 1, Dir: abs})
	a, done := launch(t, js, aggregator.Config{DataDir: dir, LeaseWait: -1, ExitWhenDone: true})
	if err := runResult(t, done); err != nil {
		t.Fatalf("Run = %v, want the dead aggregator's lease taken over", err)
	}
	if a.Last().Completed != 1 {
		t.Errorf("last event %+v", a.Last())
	}
}

// An aggregator that loses its lease (it could not renew it in time and
// another aggregator took it) stops instead of writing on.
func TestLostLeaseStops(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 10}, nil)
	dir := t.TempDir()
	a, done := launch(t, js, aggregator.Config{DataDir: dir})
	brokertest.Eventually(t, 10*time.Second, func() bool { return a.Last().Phase != "" }, "the aggregator to start")
	putLease(t, js, schema.Lease{Holder: "elsewhere:7:x", Host: "elsewhere", PID: 7, Dir: "/data/" + run})
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "lost the right to write") || !strings.Contains(err.Error(), "elsewhere") {
			t.Errorf("Run = %v, want it to stop naming the new holder", err)
		}
	case <-time.After(2 * provision.LeaseTTL):
		t.Fatal("the aggregator went on after losing its lease")
	}
}

func putLease(t *testing.T, js jetstream.JetStream, l schema.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := provision.LeasesBucket(ctx, js, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.AcquiredAt, l.RenewedAt = time.Now().UTC(), time.Now().UTC()
	b, _ := json.Marshal(l)
	if _, err := kv.Put(ctx, schema.AggregatorLeaseKey(run), b); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

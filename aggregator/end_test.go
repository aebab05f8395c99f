package aggregator_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// A run whose every unit is completed is reported done by the event that
// follows the write of its last line, with that line already in
// completions.jsonl: no event counts every unit without being done, and
// no timer stands between the last line and the end (the events' period
// here is an hour, so every event after the first is one the aggregator
// asked for itself).
func TestDoneFollowsTheLastLine(t *testing.T) {
	const n = 40
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
	dir := t.TempDir()
	out := filepath.Join(dir, run, aggregator.CompletionsFile)
	var mu sync.Mutex
	var events []schema.Throughput
	linesAtDone := -1
	a, stop := start(t, js, aggregator.Config{DataDir: dir, EventInterval: time.Hour, ExitWhenDone: true,
		OnEvent: func(s schema.Throughput) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, s)
			if s.Phase == schema.PhaseDone && linesAtDone < 0 {
				b, _ := os.ReadFile(out)
				linesAtDone = bytes.Count(b, []byte("\n"))
			}
		}})
	publishResults(t, js, ids(0, n/2))
	publishResults(t, js, ids(n/2, n))
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the run was not reported done")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range events {
		if e.Completed == n && e.Phase != schema.PhaseDone {
			t.Errorf("an event counts all %d units completed in phase %s, not done", n, e.Phase)
		}
	}
	if linesAtDone != n {
		t.Errorf("completions.jsonl held %d lines when the run was reported done, want %d", linesAtDone, n)
	}
}

// An aggregator that stops once the run is done gives up its open
// fetches instead of waiting them out, whether it exits by itself
// (--exit-when-done) or is told to stop (aerie run stops it after its
// workers): the command ends as soon as the last line is written. The
// fetches here last ten minutes, so a run that returns at all did not
// wait one out.
func TestDoneAggregatorGivesUpOpenFetches(t *testing.T) {
	for _, exit := range []bool{true, false} {
		t.Run(fmt.Sprintf("exit-when-done=%v", exit), func(t *testing.T) {
			const n = 5
			_, _, js := brokertest.Provisioned(t)
			brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
			dir := t.TempDir()
			a, err := aggregator.New(aggregator.Config{Run: run, DataDir: dir, Logger: quiet, EventInterval: time.Hour, ExitWhenDone: exit}, js)
			if err != nil {
				t.Fatal(err)
			}
			aggregator.SetFetchWait(a, 10*time.Minute)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ended := make(chan error, 1)
			go func() { ended <- a.Run(ctx) }()
			publishResults(t, js, ids(0, n))
			if !exit {
				select {
				case <-a.Done():
				case <-time.After(time.Minute):
					t.Fatal("the run was not reported done")
				}
				cancel()
			}
			select {
			case err := <-ended:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the aggregator of a done run did not return")
			}
			if lines := readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)); len(lines) != n {
				t.Errorf("completions.jsonl has %d lines, want %d", len(lines), n)
			}
		})
	}
}

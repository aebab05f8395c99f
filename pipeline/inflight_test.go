package pipeline_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
)

// Once every prompt is settled nothing is in flight: the events of phase
// done say in_flight 0, though the workers' windows are larger than what
// was left at the end and their pulls still wait for more.
func TestDoneEventsHoldNothing(t *testing.T) {
	cfg := config(t, "settled", promptsFile(t, 40))
	sum, err := pipeline.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done {
		t.Fatalf("summary %+v, want the run done", sum)
	}
	f, err := os.Open(sum.EventsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev schema.Throughput
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad event line: %v", err)
		}
		if ev.Phase != schema.PhaseDone {
			continue
		}
		done++
		if ev.InFlight != 0 {
			t.Errorf("event of phase done at %s says in_flight %d, want 0", ev.Time.Format("15:04:05.000"), ev.InFlight)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if done == 0 {
		t.Error("no event of phase done")
	}
}

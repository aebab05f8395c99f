package policy_test

import (
	"compress/gzip"
	"fmt"
	"os"
	"testing"

	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/policy/policytest"
)

// goldenFile holds every decision the workers made during one run of
// BenchmarkTwoBackendsMakespan and BenchmarkLongestFirst (package
// worker): what each saw, what it remembered, and the plan and memory it
// made. A change of policy that changes a decision records it again, on
// purpose, and says why (worker/golden_record_test.go tells how).
const goldenFile = "testdata/decisions.jsonl.gz"

// TestGoldenDecisions replays every recorded decision through Decide,
// each decision of a worker from the memory the one before it made, and
// checks that it makes the recorded plan and memory.
func TestGoldenDecisions(t *testing.T) {
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	memory := map[string]policy.Memory{}
	decisions, kinds := 0, map[string]int{}
	err = policytest.Replay(zr, func(d policytest.Decision) error {
		m := memory[d.Seq]
		if d.Start != nil {
			m = *d.Start
		}
		plan, next := policy.Decide(d.Config, d.Snapshot, m)
		if err := d.Check(plan, next); err != nil {
			return fmt.Errorf("sequence %s (%s) decision %d: %w", d.Seq, d.Worker, d.N, err)
		}
		memory[d.Seq] = next
		decisions++
		kinds[d.Kind()]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if decisions == 0 {
		t.Fatal("no decisions recorded")
	}
	t.Logf("%d decisions of %d workers replayed; plans that %v", decisions, len(memory), kinds)
}

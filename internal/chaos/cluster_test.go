package chaos_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/internal/chaos"
)

// Environment variables of the cluster runs (all optional, beside
// AERIE_CHAOS, AERIE_CHAOS_DIR and AERIE_CHAOS_KEEP):
//
//	AERIE_CHAOS_PROMPTS=N      number of prompts
//	AERIE_CHAOS_SEED=N         seed
//	AERIE_CHAOS_LOOPBACK=1     run every process on 127.0.0.1, without network namespaces

// TestClusterShort runs with `go test ./...`: 900 prompts through a
// three-node cluster of `aerie server` processes (authenticated routes,
// R3 streams), two workers and the aggregator, each in a network
// namespace of its own when the machine allows it, while the leader of
// AERIE_PROMPTS is killed, a worker's host is cut off for longer than
// AckWait, and a node is rebuilt from an empty store. About a minute and
// a half.
func TestClusterShort(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") == "0" {
		t.Skip("AERIE_CHAOS=0")
	}
	runCluster(t, chaos.ClusterShort())
}

// TestCluster is the same with 3,000 prompts and a longer cut-off; its
// figures are in docs/cluster.md. Opt-in, like TestChaos.
func TestCluster(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") != "1" {
		t.Skip("set AERIE_CHAOS=1 (or run `make chaos`) for the 3,000-prompt cluster run")
	}
	if testing.Short() {
		t.Skip("the 3,000-prompt cluster run is not short; see TestClusterShort")
	}
	runCluster(t, chaos.ClusterLong())
}

func runCluster(t *testing.T, cfg chaos.ClusterConfig) {
	cfg.Seed = time.Now().UnixNano() % 1_000_000
	applyEnv(t, &chaos.Config{}) // reject malformed shared variables early
	if v := os.Getenv("AERIE_CHAOS_SEED"); v != "" {
		if _, err := fmt.Sscan(v, &cfg.Seed); err != nil {
			t.Fatalf("AERIE_CHAOS_SEED=%q: %v", v, err)
		}
	}
	if v := os.Getenv("AERIE_CHAOS_PROMPTS"); v != "" {
		if _, err := fmt.Sscan(v, &cfg.Prompts); err != nil {
			t.Fatalf("AERIE_CHAOS_PROMPTS=%q: %v", v, err)
		}
	}
	cfg.Loopback = os.Getenv("AERIE_CHAOS_LOOPBACK") == "1"
	cfg.Dir = workDir(t)
	cfg.Bin = buildAerie(t, cfg.Dir)
	cfg.Logf = func(format string, args ...any) { fmt.Printf("%s %s\n", cfg.Run, fmt.Sprintf(format, args...)) }

	h, err := chaos.NewCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	rep, err := h.Run(ctx)
	fmt.Print(rep)
	if rep.Network != "" && rep.Network[:8] == "loopback" {
		t.Log(rep.Network)
	}
	if err != nil {
		t.Fatalf("seed %d: %v (logs in %s)", cfg.Seed, err, cfg.Dir)
	}
	o := rep.Outcome
	if len(o.Duplicates) > 0 || len(o.Missing) > 0 || len(o.InBoth) > 0 {
		t.Errorf("seed %d: %d duplicates, %d in both files, %d missing: every prompt must end in exactly one of completions.jsonl and failed.jsonl, once",
			cfg.Seed, len(o.Duplicates), len(o.InBoth), len(o.Missing))
	}
	if len(o.Unparseable) > 0 || len(o.Unknown) > 0 {
		t.Errorf("seed %d: %d unparseable lines, %d ids not in the input", cfg.Seed, len(o.Unparseable), len(o.Unknown))
	}
	if len(rep.Unexpected) > 0 {
		t.Errorf("seed %d: %d processes exited on their own (see the report)", cfg.Seed, len(rep.Unexpected))
	}
	if rep.Cut.DuringCut > 0 && rep.Cut.Mode == "veth down" {
		t.Errorf("%s stored %d results while its host was off the network", rep.Cut.Worker, rep.Cut.DuringCut)
	}
}

package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/hscheck"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
)

// samplesFile writes n extraction samples of token ids below vocab.
func samplesFile(t testing.TB, n, vocab int) string {
	return samplesFileSeed(t, n, vocab, 3)
}

// samplesFileSeed is samplesFile with the samples of seed.
func samplesFileSeed(t testing.TB, n, vocab int, seed int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "samples.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := simulator.WriteSamples(f, n, seed, vocab); err != nil {
		t.Fatal(err)
	}
	return path
}

// A hidden-states run through bad files from the server ends with the
// output speculators trains from: one verified file per sample, named by
// its result with its checksum, the dataset's rows in idx order, and
// nothing else in hidden_states/ nor in the server's directory.
func TestHiddenStatesRun(t *testing.T) {
	t.Parallel()
	cfg := config(t, "hs", samplesFile(t, 150, 1000))
	cfg.Task = schema.TaskHiddenStates
	cfg.Extraction = &schema.Extraction{LayerIDs: []int{2, 30, 58, 61}, HiddenSize: 32, DType: "BF16"}
	cfg.Sim.VocabSize = 1000
	cfg.Sim.FileFaults = simulator.FileFaults{Missing: 0.03, Cut: 0.03, NaN: 0.03, OtherTokens: 0.03}
	cfg.Worker.RetryBase, cfg.Worker.RetryMax, cfg.Worker.BreakerThreshold = time.Millisecond, 10*time.Millisecond, 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := pipeline.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done || sum.Completed != 150 || sum.Failed != 0 {
		t.Fatalf("summary: %+v", sum)
	}
	dir := filepath.Join(cfg.DataDir, "hs")
	m, err := schema.DecodeManifest(mustRead(t, filepath.Join(dir, "manifest.json")))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := hscheck.Check(m, dir, filepath.Join(dir, aggregator.CompletionsFile), filepath.Join(dir, aggregator.FailedFile))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Files != 150 || rep.Rows != 150 {
		t.Errorf("output: %s", rep)
	}
	// The check sees a file gone, one changed and one that no result
	// names.
	hsDir := filepath.Join(dir, schema.HiddenStatesDir)
	if err := os.Remove(filepath.Join(hsDir, "hs_3.safetensors")); err != nil {
		t.Fatal(err)
	}
	b := mustRead(t, filepath.Join(hsDir, "hs_4.safetensors"))
	b[len(b)-1] ^= 1
	if err := os.WriteFile(filepath.Join(hsDir, "hs_4.safetensors"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hsDir, ".hs_5.safetensors.x.partial"), []byte("cut"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err = hscheck.Check(m, dir, filepath.Join(dir, aggregator.CompletionsFile), filepath.Join(dir, aggregator.FailedFile))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Missing != 1 || rep.Differs != 1 || rep.Extra != 1 || rep.OK() {
		t.Errorf("after tampering: %s", rep)
	}
	left, _ := os.ReadDir(filepath.Join(cfg.DataDir, "sim-hidden-states", "hs"))
	if len(left) != 0 {
		t.Errorf("%d files left in the server's directory", len(left))
	}
}

// A sample whose token id the server does not know is refused before
// anything is queued, naming it.
func TestHiddenStatesRunRefusesUnknownIDs(t *testing.T) {
	t.Parallel()
	cfg := config(t, "hs", samplesFile(t, 20, 5000))
	cfg.Task = schema.TaskHiddenStates
	cfg.Extraction = &schema.Extraction{LayerIDs: []int{2, 30}, HiddenSize: 8, DType: "BF16"}
	cfg.Sim.VocabSize = 1000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := pipeline.Run(ctx, cfg)
	if err == nil || !contains(err.Error(), "holds token id", "out of vocabulary", "nothing was queued") {
		t.Fatalf("%v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

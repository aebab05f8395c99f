package doctor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
)

// extractionConfig is the doctor of a hidden-states run not produced
// yet, of the samples in its prompts file, against a server that
// extracts into serverDir (none: a server without extraction).
func extractionConfig(t *testing.T, b *bundle, model, serverDir string) doctor.Config {
	cfg := b.cfg
	cfg.Run, cfg.Model, cfg.YieldToServing = "hs-new", model, false
	cfg.Extraction = &schema.Extraction{LayerIDs: []int{2, 30}, HiddenSize: 16, DType: "BF16"}
	cfg.PromptsFile = writePrompts(t, b.dir, `{"input_ids":[5,6,7],"loss_mask":[0,1,1]}`, `{"input_ids":[8],"loss_mask":[1]}`)
	cfg.Backend = startSim(t, simulator.Config{Model: model, HiddenStatesPath: serverDir,
		HiddenLayerIDs: []int{2, 30}, HiddenSize: 16, HiddenDType: "BF16"})
	return cfg
}

// The preflight extracts a short prompt, verifies the server's file as
// a worker would, and removes it; the space check names the run's size
// and the free space, and no chat question is asked.
func TestExtractionVerifiedEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	serverDir := t.TempDir()
	rep := run(t, extractionConfig(t, b, "org/small-model", serverDir))
	expect(t, rep, "extraction", doctor.Pass, "extracted a 3-token prompt", "verified (3 tokens x 2 layers x 16 hidden, BF16", "removed")
	// 4 tokens x (2 x 16 x 2 bytes + 8) = 288 bytes.
	expect(t, rep, "extract-space", doctor.Pass, "288 B for 4 tokens (2 samples in prompts.jsonl) x 2 layers x 16 hidden x 2 bytes (BF16)", "free at")
	expect(t, rep, "completion", doctor.Skip, "asks no chat question")
	if left, _ := os.ReadDir(serverDir); len(left) != 0 {
		t.Errorf("%d files left in the server's directory", len(left))
	}
}

// A server without the extraction method fails with the vLLM flags that
// give it, naming the run's layers.
func TestExtractionMissingMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep := run(t, extractionConfig(t, b, "org/small-model", ""))
	expect(t, rep, "extraction", doctor.Fail, "without extracting hidden states",
		`fix:"method": "extract_hidden_states"`, `fix:"eagle_aux_hidden_state_layer_ids": [2, 30]`, "fix:ExampleHiddenStatesConnector")
}

// A server whose files do not match the run (other layers) fails.
func TestExtractionOtherLayers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := extractionConfig(t, b, "org/small-model", t.TempDir())
	cfg.Extraction.LayerIDs = []int{2, 30, 58, 61}
	rep := run(t, cfg)
	expect(t, rep, "extraction", doctor.Fail, "does not hold what the run needs", "fix:--layer-ids")
}

// An MLA model gets the warning naming vLLM's known issues.
func TestExtractionWarnsOnMLA(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep := run(t, extractionConfig(t, b, "moonshotai/Kimi-K2.5", t.TempDir()))
	expect(t, rep, "extraction", doctor.Warn, "verified", "#46973", "MLA verifiers are unsupported", "#50815")
}

// The space check fails when the files cannot fit: a run of more tokens
// than any disk holds.
func TestHiddenStatesSpaceTooSmall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := extractionConfig(t, b, "org/small-model", t.TempDir())
	cfg.Extraction.HiddenSize = 1 << 40
	cfg.DataDir = filepath.Join(b.dir, "data")
	rep := run(t, cfg)
	expect(t, rep, "extract-space", doctor.Fail, "the hidden states need", "free at", "fix:--out on a larger disk")
}

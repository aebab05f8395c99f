package export_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/export"
	"github.com/aerie-dev/aerie/schema"
)

// An export of a run that needs a feature this build lacks is refused,
// naming the feature and the version that has it: its lines may carry
// what this build would drop or misread.
func TestExportRefusesARunItLacksAFeatureOf(t *testing.T) {
	m, err := schema.DecodeManifest([]byte(`{"v":2,"run":"r","model":"m","total":1,"needs":["warp-drive"],"written_by":"v9.9.9"}`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err = export.Write(context.Background(), export.Files(t.TempDir()), &out, export.Options{Format: export.FormatSpecForge, Manifest: m})
	if err == nil || !strings.Contains(err.Error(), "warp-drive") || !strings.Contains(err.Error(), "v9.9.9") {
		t.Fatalf("export: %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("wrote %d bytes", out.Len())
	}
	m.Needs = []string{schema.FeatureTokenIDs}
	if err := (export.Options{Format: export.FormatSpecForge, Manifest: m}).Validate(); err != nil {
		t.Errorf("a run whose features this build has: %v", err)
	}
}

// A hidden-states run has no answers: export says where its dataset is.
func TestExportRefusesAHiddenStatesRun(t *testing.T) {
	m := &schema.Manifest{Run: "hs", Model: "m", Total: 1, Task: schema.TaskHiddenStates,
		Extraction: &schema.Extraction{LayerIDs: []int{2}, HiddenSize: 8, DType: "BF16", Out: "/shared/hs"}}
	err := (export.Options{Format: export.FormatSpeculators, Manifest: m}).Validate()
	if err == nil || !strings.Contains(err.Error(), "/shared/hs") || !strings.Contains(err.Error(), "no answers to export") {
		t.Fatalf("%v", err)
	}
}

package producer

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// A run that needs nothing beyond version 1 is a manifest of version 1
// whose messages name no feature: builds older than features serve it.
func TestPlainRunNeedsNothing(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "prompts.jsonl", promptLines(0, 5)))
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	m := storedManifest(t, e.js, cfg.Run)
	if m.V != schema.ManifestVersion1 || len(m.Needs) != 0 || m.WrittenBy != schema.BuildVersion() {
		t.Errorf("manifest version %d, needs %v, written by %q", m.V, m.Needs, m.WrittenBy)
	}
	for _, msg := range fetchPrompts(t, e.js, cfg.Run, 5) {
		if h := msg.Headers().Get(schema.HeaderNeeds); h != "" {
			t.Errorf("a plain run's message needs %q", h)
		}
	}
}

// A --samples 3 run needs samples in one message: its manifest says so
// at version 2, and every message names the features with the version
// that wrote it.
func TestSamplesRunNamesItsNeeds(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "prompts.jsonl", promptLines(0, 5)))
	cfg.Samples = 3
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	m := storedManifest(t, e.js, cfg.Run)
	want := []string{schema.FeatureSamples, schema.FeatureSamplesInMessage}
	if m.V != schema.ManifestVersion || !slices.Equal(m.Needs, want) {
		t.Errorf("manifest version %d, needs %v; want version %d needing %v", m.V, m.Needs, schema.ManifestVersion, want)
	}
	for _, msg := range fetchPrompts(t, e.js, cfg.Run, 5) {
		h := msg.Headers()
		if got := h.Get(schema.HeaderNeeds); got != "samples,samples-in-message" {
			t.Errorf("message %s needs %q", h.Get(schema.HeaderPromptID), got)
		}
		if got := h.Get(schema.HeaderWrittenBy); got != schema.BuildVersion() {
			t.Errorf("message written by %q", got)
		}
	}
}

// --needs names a feature the run needs besides its settings'; one this
// build lacks is refused before anything is queued, and a run produced
// again cannot need more than it was produced with.
func TestNeedsFlag(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "prompts.jsonl", promptLines(0, 5)))
	cfg.Needs = []string{"warp-drive"}
	_, err := Run(ctxFor(t), e.js, cfg)
	if err == nil || !strings.Contains(err.Error(), "needs warp-drive: this aerie") {
		t.Fatalf("a feature this build lacks: %v", err)
	}
	if n := storedPrompts(t, e.js); n != 0 {
		t.Fatalf("%d prompts queued for a run this build cannot produce", n)
	}

	cfg.Needs = []string{schema.FeatureTokenIDs}
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	if m := storedManifest(t, e.js, cfg.Run); m.V != schema.ManifestVersion || !slices.Equal(m.Needs, cfg.Needs) {
		t.Errorf("manifest version %d, needs %v", m.V, m.Needs)
	}
	cfg.Needs = []string{schema.FeatureTokenIDs, schema.FeatureSamples}
	_, err = Run(ctxFor(t), e.js, cfg)
	var conflict *ManifestConflictError
	if !errors.As(err, &conflict) || !strings.Contains(err.Error(), "feature samples is needed now") {
		t.Errorf("a resumed produce needing more: %v", err)
	}
}

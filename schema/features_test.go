package schema

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestManifestVersionIsTheLowestThatSaysItsNeeds(t *testing.T) {
	plain := &Manifest{Run: "r", Model: "m", Total: 10}
	b, err := EncodeManifest(plain)
	if err != nil {
		t.Fatal(err)
	}
	if plain.V != ManifestVersion1 || plain.Needs != nil || strings.Contains(string(b), `"needs"`) {
		t.Errorf("a run that needs no feature: version %d, needs %v; want version 1 with none, which every aerie reads:\n%s", plain.V, plain.Needs, b)
	}

	samples := &Manifest{Run: "r", Model: "m", Total: 30, Samples: 3, SamplesPerMessage: 3, Prompts: 10, WrittenBy: "v9"}
	b, err = EncodeManifest(samples)
	if err != nil {
		t.Fatal(err)
	}
	if samples.V != ManifestVersion || !slices.Equal(samples.Needs, []string{FeatureSamples, FeatureSamplesInMessage}) {
		t.Errorf("a --samples 3 run: version %d, needs %v; want version %d needing samples and samples-in-message", samples.V, samples.Needs, ManifestVersion)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != ManifestVersion || !slices.Equal(got.Needs, samples.Needs) || got.WrittenBy != "v9" {
		t.Errorf("decoded: version %d, needs %v, written by %q", got.V, got.Needs, got.WrittenBy)
	}
}

// A manifest of version 1 written before needs existed says what its
// settings use all the same once decoded.
func TestVersionOneManifestNeedsAreCompleted(t *testing.T) {
	old := `{"v":1,"run":"r","model":"m","total":30,"samples":3,"samples_per_message":3,"return_token_ids":true}`
	m, err := DecodeManifest([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{FeatureSamples, FeatureSamplesInMessage, FeatureTokenIDs}
	if !slices.Equal(m.Needs, want) {
		t.Errorf("needs %v, want %v", m.Needs, want)
	}
}

func TestNewerManifestVersionIsRefused(t *testing.T) {
	_, err := DecodeManifest([]byte(`{"v":3,"run":"r"}`))
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Got != 3 || !strings.Contains(err.Error(), "reads versions 1 and 2") {
		t.Errorf("version 3: %v", err)
	}
}

// A feature this build lacks is named, with the version that has it.
func TestLackErrorNamesFeatureAndVersion(t *testing.T) {
	m, err := DecodeManifest([]byte(`{"v":2,"run":"r","model":"m","total":1,"needs":["samples","warp-drive"],"written_by":"v2.0.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	if l := Lacking(m.Needs); !slices.Equal(l, []string{"warp-drive"}) {
		t.Fatalf("lacking %v", l)
	}
	err = CheckNeeds("run r", m.Needs, m.WrittenBy)
	var le *LackError
	if !errors.As(err, &le) {
		t.Fatalf("CheckNeeds: %v", err)
	}
	for _, want := range []string{"run r", "warp-drive", "which aerie v2.0.0 has", BuildVersion()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if CheckNeeds("run r", []string{FeatureSamples}, "") != nil {
		t.Error("a feature this build has is lacking")
	}
}

func TestNeedsHeaderRoundTrip(t *testing.T) {
	needs := MessageNeeds([]string{FeatureTurnsAll, FeatureSamples}, []string{FeatureSamples, FeatureTokenIDs})
	h := FormatNeeds(needs)
	if h != "samples,token-ids,turns-all" {
		t.Errorf("header %q", h)
	}
	if got := ParseNeeds(h); !slices.Equal(got, needs) {
		t.Errorf("parsed %v", got)
	}
	if ParseNeeds("") != nil || len(ParseNeeds(" , ")) != 0 {
		t.Error("an empty header needs something")
	}
}

// The manifest in the runs bucket lists its needs, readable with
// `nats kv get`.
func TestManifestJSONListsNeeds(t *testing.T) {
	m := &Manifest{Run: "r", Model: "m", Total: 1, Turns: TurnsAll, WrittenBy: "v1"}
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["v"] != float64(2) || raw["written_by"] != "v1" {
		t.Errorf("manifest JSON: %s", b)
	}
	if n, _ := raw["needs"].([]any); len(n) != 1 || n[0] != FeatureTurnsAll {
		t.Errorf("needs in JSON: %v", raw["needs"])
	}
}

func TestNeedsCacheChecksEachValueOnce(t *testing.T) {
	var c NeedsCache
	ok := nats.Header{}
	ok.Set(HeaderNeeds, FeatureSamples+","+FeatureTokenIDs)
	for range 2 {
		if err := c.Check("r", ok); err != nil {
			t.Fatal(err)
		}
	}
	if p := c.ok.Load(); p == nil || *p != ok.Get(HeaderNeeds) {
		t.Errorf("cached %v", p)
	}
	lacking := nats.Header{}
	lacking.Set(HeaderNeeds, "warp-drive")
	lacking.Set(HeaderWrittenBy, "v9")
	var le *LackError
	if err := c.Check("r", lacking); !errors.As(err, &le) || le.By != "v9" || !strings.Contains(err.Error(), "a message of run r") {
		t.Errorf("lacking: %v", err)
	}
	if err := c.Check("r", nats.Header{}); err != nil {
		t.Errorf("no header: %v", err)
	}
}

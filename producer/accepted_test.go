package producer

import (
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// Accepted is called once, with the stored manifest and its final total,
// before the first prompt is published; a file that is refused never
// calls it.
func TestAcceptedBeforePublishing(t *testing.T) {
	e := setup(t)
	const n = 20
	cfg := e.config(e.file(t, "prompts.jsonl", promptLines(0, n)))
	var calls int
	var storedThen uint64
	var got *schema.Manifest
	cfg.Accepted = func(m *schema.Manifest) {
		calls++
		got = m
		storedThen = storedPrompts(t, e.js)
	}
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || got == nil || got.Run != cfg.Run || got.Total != n {
		t.Fatalf("Accepted called %d times with %+v, want once with the manifest of %d prompts", calls, got, n)
	}
	if storedThen != 0 {
		t.Errorf("%d prompts were stored before Accepted was called", storedThen)
	}

	bad := e.config(e.file(t, "mixed.jsonl", mixedLines))
	bad.Run = "r2"
	bad.Accepted = func(*schema.Manifest) { t.Error("Accepted called for a file with invalid lines") }
	if _, err := Run(ctxFor(t), e.js, bad); err == nil {
		t.Fatal("a file with invalid lines was produced")
	}
}

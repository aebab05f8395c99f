package producer

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// queuedOrder returns the ids and samples of run's n prompt messages in
// stream order, as "id/sample", each sample of a message of several.
func queuedOrder(t *testing.T, e *testEnv, run string, n int) []string {
	t.Helper()
	var out []string
	for _, m := range fetchPrompts(t, e.js, run, n) {
		p, err := schema.DecodePrompt(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for k := range p.SampleCount() {
			out = append(out, fmt.Sprintf("%s/%d", p.ID, p.Sample+k))
		}
	}
	return out
}

// With hints on at least half the prompts, produce queues them longest
// first: by descending hint, ties and the prompts without a hint in the
// file's order, each prompt's samples together. The prompts digest is the
// one of the file's order, so producing again, in either order, queues
// nothing more, and each queued prompt carries its hint.
func TestLongestFirst(t *testing.T) {
	e := setup(t)
	lines := []string{
		`{"id": "a", "prompt": "q", "length_hint": 10}`,
		`{"id": "b", "prompt": "q"}`,
		`{"id": "c", "prompt": "q", "length_hint": 300}`,
		`{"id": "d", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "twenty bytes of text"}]}`,
		`{"id": "e", "prompt": "q", "length_hint": 300}`,
		`{"id": "f", "prompt": "q"}`,
	}
	file := e.file(t, "hinted.jsonl", lines)
	cfg := e.config(file)
	cfg.Samples = 2
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Order != OrderLongestFirst || rep.Hinted != 4 {
		t.Fatalf("order %q with %d hinted, want %s and 4", rep.Order, rep.Hinted, OrderLongestFirst)
	}
	got := queuedOrder(t, e, "r1", 6)
	want := []string{"c/0", "c/1", "e/0", "e/1", "a/0", "a/1", "d/0", "d/1", "b/0", "b/1", "f/0", "f/1"}
	if !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}

	// The same file in the file's order into another run: the same digest.
	in := cfg
	in.Run, in.Order = "r2", OrderInput
	rep2, err := Run(ctxFor(t), e.js, in)
	if err != nil {
		t.Fatal(err)
	}
	if rep2.PromptsDigest != rep.PromptsDigest {
		t.Errorf("digest %s in the file's order, %s longest first", rep2.PromptsDigest, rep.PromptsDigest)
	}
	if got := queuedOrder(t, e, "r2", 6); got[0] != "a/0" || got[2] != "b/0" {
		t.Errorf("--order input queued %v, want the file's order", got)
	}

	// Producing again, either way, queues nothing.
	for _, order := range []string{"", OrderInput} {
		again := cfg
		again.Order = order
		rep, err := Run(ctxFor(t), e.js, again)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Published != 0 || rep.AlreadyQueued != 12 {
			t.Errorf("order %q again: published %d, already queued %d; want 0 and 12", order, rep.Published, rep.AlreadyQueued)
		}
	}
	hints := map[string]int{}
	for _, m := range fetchPrompts(t, e.js, "r1", 6) {
		p, _ := schema.DecodePrompt(m.Data())
		hints[p.ID] = p.LengthHint
	}
	if hints["c"] != 300 || hints["d"] != 5 || hints["b"] != 0 {
		t.Errorf("queued hints %v, want c 300, d 5 (its own answer), b none", hints)
	}
}

// With fewer than half the prompts hinted the file's order is kept, unless
// longest first is asked for.
func TestOrderAuto(t *testing.T) {
	e := setup(t)
	file := e.file(t, "few.jsonl", []string{
		`{"id": "a", "prompt": "q"}`,
		`{"id": "b", "prompt": "q"}`,
		`{"id": "c", "prompt": "q", "length_hint": 9}`,
	})
	rep, err := Run(ctxFor(t), e.js, e.config(file))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Order != OrderInput {
		t.Errorf("one hint in three: order %q, want %s", rep.Order, OrderInput)
	}
	cfg := e.config(file)
	cfg.Run, cfg.Order = "r2", OrderLongestFirst
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	if got := queuedOrder(t, e, "r2", 3); !slices.Equal(got, []string{"c/0", "a/0", "b/0"}) {
		t.Errorf("longest first asked for: queued %v", got)
	}
	bad := e.config(file)
	bad.Order = "shortest-first"
	if _, err := Run(ctxFor(t), e.js, bad); err == nil {
		t.Error("an unknown order was accepted")
	}
}

// Two produces of the same hinted file at once, longest first: every
// prompt is queued once, whichever stores it.
func TestLongestFirstTwoAtOnce(t *testing.T) {
	e := setup(t)
	var lines []string
	for i := range 300 {
		lines = append(lines, fmt.Sprintf(`{"id": "p%03d", "prompt": "q %d", "length_hint": %d}`, i, i, 1+i%37))
	}
	cfg := e.config(e.file(t, "hinted.jsonl", lines))
	reps := make([]*Report, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = Run(ctxFor(t), e.js, cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	if got := reps[0].Published + reps[1].Published; got != 300 {
		t.Errorf("published %d and %d, want 300 in all", reps[0].Published, reps[1].Published)
	}
	if n := storedPrompts(t, e.js); n != 300 {
		t.Errorf("%d prompts stored, want 300", n)
	}
}

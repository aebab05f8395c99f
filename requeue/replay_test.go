package requeue

import (
	"maps"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// replayBundle is a run whose workers gave up on several prompts:
//
//	perm-1, perm-2  permanent
//	exh-1           retries exhausted
//	done-1          permanent, yet its answer is stored (a redelivery won)
//	poison-1        poison: the dead letter holds no prompt
//	ok-1            answered and acknowledged, no dead letter
//
// and another run on the same server with a dead letter of its own.
func replayBundle(t *testing.T) *bundle {
	b := setup(t, "r", "perm-1", "perm-2", "exh-1", "done-1", "poison-1", "ok-1")
	msgs := b.fetch(6)
	reasons := []string{schema.ReasonPermanent, schema.ReasonPermanent, schema.ReasonExhausted, schema.ReasonPermanent}
	for i, reason := range reasons {
		b.fail(msgs[i], reason)
	}
	b.result("done-1")
	b.deadLetter("r", "poison-1", nil, schema.ReasonPoison)
	if err := msgs[4].TermWithReason(schema.ReasonPoison); err != nil {
		t.Fatal(err)
	}
	b.result("ok-1")
	b.ack(msgs[5])
	b.settled(0)

	b.queue("other", "x-1")
	b.deadLetter("other", "x-1", prompt("x-1").Messages, schema.ReasonPermanent)
	return b
}

func TestReplayDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	b := replayBundle(t)
	before := b.states()
	rep, err := Replay(b.ctx, b.js, ReplayConfig{Run: "r", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if after := b.states(); after != before {
		t.Fatalf("dry run changed the streams: %+v, was %+v", after, before)
	}
	wantRead := map[string]int{schema.ReasonPermanent: 3, schema.ReasonExhausted: 1, schema.ReasonPoison: 1}
	wantReplayed := map[string]int{schema.ReasonPermanent: 2, schema.ReasonExhausted: 1}
	if !maps.Equal(rep.Read, wantRead) || !maps.Equal(rep.Replayed, wantReplayed) || rep.Completed != 1 || rep.Unreplayable != 1 || rep.NotSelected != 0 {
		t.Fatalf("report %+v", rep)
	}
	sameIDs(t, "would replay", unitIDs(rep.FirstUnits), "perm-1", "perm-2", "exh-1")
	out := rep.String()
	for _, want := range []string{
		"run r: 5 dead letters (permanent 3, poison 1, retries-exhausted 1)",
		"would replay 3 (permanent 2, retries-exhausted 1), would skip 1 already completed, 1 cannot be replayed",
		`first ids: "perm-1", "perm-2", "exh-1"`,
		"poison-1",
		"dry run: nothing changed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	b.nothingMore()
}

func TestReplayByReason(t *testing.T) {
	t.Parallel()
	b := replayBundle(t)
	rep, err := Replay(b.ctx, b.js, ReplayConfig{Run: "r", Reasons: []string{schema.ReasonPermanent}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NumReplayed() != 2 || rep.Completed != 1 || rep.NotSelected != 2 || rep.Resumed != 0 {
		t.Fatalf("report %+v", rep)
	}
	if out := rep.String(); !strings.Contains(out, "replayed 2 (permanent 2), skipped 1 already completed, 2 not selected") {
		t.Errorf("report:\n%s", out)
	}
	sameIDs(t, "delivered", ids(b.fetch(2)), "perm-1", "perm-2")
	b.nothingMore()
	for id, want := range map[string]bool{"perm-1": false, "perm-2": false, "exh-1": true, "done-1": true, "poison-1": true} {
		if got := b.stored(schema.DeadStream, schema.DeadSubject("r", schema.Unit{ID: id})) != nil; got != want {
			t.Errorf("dead letter of %s stored: %v, want %v", id, got, want)
		}
	}
	if b.stored(schema.DeadStream, schema.DeadSubject("other", schema.Unit{ID: "x-1"})) == nil {
		t.Error("the other run's dead letter was removed")
	}

	// Replaying again finds nothing more of that class.
	rep, err = Replay(b.ctx, b.js, ReplayConfig{Run: "r", Reasons: []string{schema.ReasonPermanent}})
	if err != nil || rep.NumReplayed() != 0 || rep.Completed != 1 {
		t.Fatalf("second replay: %+v, %v", rep, err)
	}
	b.nothingMore()
}

func TestReplayByIDs(t *testing.T) {
	t.Parallel()
	b := replayBundle(t)
	file := writeLines(t, t.TempDir(), "ids.txt",
		"exh-1",
		`"perm-2"`,
		"",
		map[string]any{"id": "done-1", "reason": "permanent"},
		map[string]any{"reason": "x", "id": "no-such-id"},
		"exh-1")
	rep, err := Replay(b.ctx, b.js, ReplayConfig{Run: "r", IDsFile: file})
	if err != nil {
		t.Fatal(err)
	}
	wantReplayed := map[string]int{schema.ReasonPermanent: 1, schema.ReasonExhausted: 1}
	if !maps.Equal(rep.Replayed, wantReplayed) || rep.Completed != 1 || rep.NotSelected != 2 || rep.NumIDsNotFound != 1 {
		t.Fatalf("report %+v", rep)
	}
	if out := rep.String(); !strings.Contains(out, `1 ids of the ids file have no dead letter in run r: "no-such-id"`) {
		t.Errorf("report:\n%s", out)
	}
	sameIDs(t, "delivered", ids(b.fetch(2)), "exh-1", "perm-2")
	b.nothingMore()

	// Reasons and ids together: both must match.
	rep, err = Replay(b.ctx, b.js, ReplayConfig{Run: "r", IDsFile: file, Reasons: []string{schema.ReasonPoison}})
	if err != nil || rep.NumReplayed() != 0 {
		t.Fatalf("reasons and ids: %+v, %v", rep, err)
	}
}

func TestReplayFinishesAnInterruptedReplay(t *testing.T) {
	t.Parallel()
	b := replayBundle(t)
	r := b.requeuer()
	p := prompt("exh-1")
	if err := r.purge(b.ctx, r.prompts, b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "exh-1"}))); err != nil {
		t.Fatal(err)
	}
	if _, err := r.publish(b.ctx, &p); err != nil {
		t.Fatal(err)
	}
	rep, err := Replay(b.ctx, b.js, ReplayConfig{Run: "r", Reasons: []string{schema.ReasonExhausted}})
	if err != nil || rep.NumReplayed() != 1 || rep.Resumed != 1 {
		t.Fatalf("report %+v, %v", rep, err)
	}
	sameIDs(t, "delivered", ids(b.fetch(1)), "exh-1")
	b.nothingMore()
}

func TestReplayConfigRefuses(t *testing.T) {
	t.Parallel()
	b := replayBundle(t)
	for name, cfg := range map[string]ReplayConfig{
		"bad run":        {Run: "a.b"},
		"unknown reason": {Run: "r", Reasons: []string{"timeout"}},
		"missing file":   {Run: "r", IDsFile: t.TempDir() + "/none.txt"},
		"empty file":     {Run: "r", IDsFile: writeLines(t, t.TempDir(), "empty.txt", "")},
		"unknown run":    {Run: "nosuchrun"},
	} {
		if _, err := Replay(b.ctx, b.js, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	rep, err := Replay(b.ctx, b.js, ReplayConfig{Run: "other", Reasons: []string{schema.ReasonPoison}})
	if err != nil || !strings.Contains(rep.String(), "replayed 0, 1 not selected") {
		t.Fatalf("%v\n%s", err, rep)
	}
}

// --max-tokens travels with each replayed prompt, for the worker to use
// instead of the run's.
func TestReplayWithMaxTokens(t *testing.T) {
	t.Parallel()
	b := replayBundle(t)
	if _, err := Replay(b.ctx, b.js, ReplayConfig{Run: "r", Reasons: []string{schema.ReasonPermanent}, MaxTokens: 9000}); err != nil {
		t.Fatal(err)
	}
	msgs := b.fetch(2)
	for _, m := range msgs {
		p, err := schema.DecodePrompt(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if p.MaxTokens != 9000 {
			t.Errorf("%s replayed with max_tokens %d, want 9000", p.ID, p.MaxTokens)
		}
	}
}

package requeue

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// reconcileBundle is a run in every state a prompt can be in, with its
// input file and output directory:
//
//	done        answered, acknowledged, in completions.jsonl
//	failed      dead-lettered, terminated, in failed.jsonl
//	answered    answered and acknowledged, not yet in completions.jsonl
//	dead        dead-lettered and terminated, not yet in failed.jsonl
//	acked-lost  acknowledged, but its answer is nowhere (lost with a store)
//	in-flight   delivered, not acknowledged
//	lost        its message was lost from the prompts stream
//	queued      stored, not delivered yet
type reconcileFixture struct {
	*bundle
	input, dataDir string
}

// config is the reconcile configuration of the fixture, with the output
// files under dataDir.
func (f *reconcileFixture) config(dataDir string, dryRun bool) ReconcileConfig {
	return ReconcileConfig{
		Run: "r", PromptsFile: f.input, DryRun: dryRun,
		CompletionsFile: filepath.Join(dataDir, "r", "completions.jsonl"),
		FailedFile:      filepath.Join(dataDir, "r", "failed.jsonl"),
	}
}

func reconcileBundle(t *testing.T) *reconcileFixture {
	order := []string{"done", "failed", "answered", "dead", "acked-lost", "in-flight", "lost", "queued"}
	b := setup(t, "r", order...)
	msgs := b.fetch(6)
	b.result("done")
	b.ack(msgs[0])
	b.fail(msgs[1], schema.ReasonPermanent)
	b.result("answered")
	b.ack(msgs[2])
	b.fail(msgs[3], schema.ReasonExhausted)
	b.ack(msgs[4])
	b.settled(1) // in-flight
	r := b.requeuer()
	if err := r.prompts.DeleteMsg(b.ctx, b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "lost"})).Sequence); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	var lines []any
	for _, id := range order {
		p := prompt(id)
		lines = append(lines, map[string]any{"id": id, "messages": p.Messages})
		if id == "acked-lost" {
			lines = append(lines, "this is not JSON", "")
		}
	}
	lines = append(lines, map[string]any{"id": "done", "prompt": "again"})
	input := writeLines(t, dir, "prompts.jsonl", lines...)

	data := filepath.Join(dir, "data")
	writeLines(t, data, "r/completions.jsonl", map[string]any{"id": "done", "messages": []any{}, "content": "answer"})
	appendTo(t, filepath.Join(data, "r", "completions.jsonl"), `{"id": "torn", "mess`) // an interrupted write
	writeLines(t, data, "r/failed.jsonl", map[string]any{"id": "failed", "reason": "permanent"})
	return &reconcileFixture{bundle: b, input: input, dataDir: data}
}

func TestReconcile(t *testing.T) {
	t.Parallel()
	b := reconcileBundle(t)
	cfg := b.config(b.dataDir, true)
	before := b.states()
	rep, err := Reconcile(b.ctx, b.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if after := b.states(); after != before {
		t.Fatalf("dry run changed the streams: %+v, was %+v", after, before)
	}
	check := func(rep *ReconcileReport, verb string) {
		t.Helper()
		want := [11]int{11, 8, 2, 1, 1, 1, 1, 1, 1, 1, 1}
		got := [11]int{rep.Lines, rep.Input, rep.Invalid, rep.Completed, rep.Failed,
			rep.AwaitingResult, rep.AwaitingDeadLetter, rep.InFlight, rep.Queued, rep.RequeuedMissing, rep.RequeuedSettled}
		if got != want {
			t.Fatalf("lines, input, invalid, completed, failed, awaiting result, awaiting dead letter, in flight, queued, requeued missing, requeued settled:\n%v, want\n%v", got, want)
		}
		sameIDs(t, "requeued", unitIDs(rep.FirstRequeued), "acked-lost", "lost")
		out := rep.String()
		for _, w := range []string{
			"input: 8 prompts in " + b.input + " (11 lines, 2 invalid and ignored)",
			"completed 1, failed 1, awaiting aggregation 2, in flight 1, queued 1, " + verb + " 2 (1 missing from the stream, 1 settled without output)",
			`first ids: "acked-lost", "lost"`,
			"prompts.jsonl:6: ",
			`prompts.jsonl:11: duplicate id "done" (first on line 1)`,
		} {
			if !strings.Contains(out, w) {
				t.Errorf("report lacks %q:\n%s", w, out)
			}
		}
	}
	check(rep, "would requeue")

	cfg.DryRun = false
	rep, err = Reconcile(b.ctx, b.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	check(rep, "requeued")
	got := b.fetch(3)
	sameIDs(t, "delivered", ids(got), "queued", "acked-lost", "lost")
	b.nothingMore()
	stored, err := schema.DecodePrompt(b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "lost"})).Data)
	if err != nil || stored.Source != "prompts.jsonl:9" {
		t.Errorf("requeued prompt %+v, %v; want source prompts.jsonl:9", stored, err)
	}

	// Run again: the requeued prompts are with a worker now.
	rep, err = Reconcile(b.ctx, b.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requeued() != 0 || rep.InFlight != 4 || rep.Queued != 0 {
		t.Fatalf("second reconcile: %+v", rep)
	}
}

// Without output files (no aggregator yet), every answer counts as
// awaiting aggregation, and the report says the files are missing.
func TestReconcileWithoutOutput(t *testing.T) {
	t.Parallel()
	b := reconcileBundle(t)
	rep, err := Reconcile(b.ctx, b.js, b.config(t.TempDir(), true))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 0 || rep.Failed != 0 || rep.AwaitingResult != 2 || rep.AwaitingDeadLetter != 2 || len(rep.MissingFiles) != 2 {
		t.Fatalf("report %+v", rep)
	}
	if out := rep.String(); !strings.Contains(out, "completions.jsonl does not exist yet") || !strings.Contains(out, "is `aerie aggregate --run r` running?") {
		t.Errorf("report:\n%s", out)
	}
}

func TestReconcileRefuses(t *testing.T) {
	t.Parallel()
	b := reconcileBundle(t)
	bad := writeLines(t, b.dataDir, "r/failed.jsonl", "not an output line")
	ok := b.config(b.dataDir, true)
	with := func(change func(*ReconcileConfig)) ReconcileConfig {
		c := ok
		change(&c)
		return c
	}
	for name, cfg := range map[string]ReconcileConfig{
		"no prompts file":   with(func(c *ReconcileConfig) { c.PromptsFile = "" }),
		"no output files":   with(func(c *ReconcileConfig) { c.FailedFile = "" }),
		"missing file":      with(func(c *ReconcileConfig) { c.PromptsFile = filepath.Join(t.TempDir(), "none.jsonl") }),
		"bad output line":   ok,
		"unknown run":       with(func(c *ReconcileConfig) { c.Run = "nosuchrun" }),
		"negative attempts": with(func(c *ReconcileConfig) { c.Options.Attempts = -2 }),
	} {
		if _, err := Reconcile(b.ctx, b.js, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name == "bad output line" && !strings.Contains(err.Error(), bad+":1:") {
			t.Errorf("%s: error does not name the line: %v", name, err)
		}
	}
}

// More prompts than one look-up batch: counts and the order of the ids
// listed do not depend on the batching.
func TestReconcileManyPrompts(t *testing.T) {
	t.Parallel()
	n := 2*lookupBatch + 88
	var order []string
	var lines []any
	for i := range n {
		id := fmt.Sprintf("m%04d", i)
		order = append(order, id)
		lines = append(lines, map[string]any{"id": id, "messages": prompt(id).Messages})
	}
	b := setup(t, "r", order...)
	r := b.requeuer()
	lost := []string{order[10], order[lookupBatch], order[n-1]}
	for _, id := range lost {
		if err := r.prompts.DeleteMsg(b.ctx, b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: id})).Sequence); err != nil {
			t.Fatal(err)
		}
	}
	f := &reconcileFixture{bundle: b, input: writeLines(t, t.TempDir(), "many.jsonl", lines...)}
	rep, err := Reconcile(b.ctx, b.js, f.config(t.TempDir(), false))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Input != n || rep.Queued != n-3 || rep.RequeuedMissing != 3 || strings.Join(unitIDs(rep.FirstRequeued), ",") != strings.Join(lost, ",") {
		t.Fatalf("report %+v", rep)
	}
	if got := b.states()[0].msgs; got != uint64(n) {
		t.Fatalf("prompts stream holds %d messages, want %d", got, n)
	}
}

package requeue

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// setupSamples starts a broker and queues every sample of the prompts
// with the given ids for run "r", the way the producer does, each with
// params as the input line's own parameters.
func setupSamples(t *testing.T, samples int, params *schema.Params, ids ...string) *bundle {
	t.Helper()
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	b := &bundle{t: t, ctx: ctx, js: js, run: "r"}
	var ps []schema.Prompt
	for _, id := range ids {
		for sample := range samples {
			p := prompt(id)
			p.Sample, p.Params, p.Source = sample, params, "in.jsonl:"+strconv.Itoa(len(ps)/samples+1)
			ps = append(ps, p)
		}
	}
	brokertest.Queue(t, js, schema.Manifest{Run: "r", Samples: samples, Prompts: len(ids)}, ps)
	cons, err := provision.WorkersConsumer(ctx, js, "r", provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.cons = cons
	return b
}

// promptOf decodes a delivered prompt.
func (b *bundle) promptOf(m jetstream.Msg) *schema.Prompt {
	b.t.Helper()
	p, err := schema.DecodePrompt(m.Data())
	if err != nil {
		b.t.Fatal(err)
	}
	return p
}

// deadLetterOf stores the dead letter of the prompt m delivered, as a
// worker does, and terminates its delivery.
func (b *bundle) deadLetterOf(m jetstream.Msg, turn int) {
	b.t.Helper()
	p := b.promptOf(m)
	d := &schema.DeadLetter{Run: b.run, ID: p.ID, Sample: p.Sample, Turn: turn, Messages: p.Messages, Params: p.Params,
		Reason: schema.ReasonExhausted, Error: "test failure", Attempts: 5, Worker: "test", FailedAt: time.Now().UTC()}
	data, err := schema.EncodeDeadLetter(d)
	if err != nil {
		b.t.Fatal(err)
	}
	out := nats.NewMsg(schema.DeadSubject(b.run, d.Unit()))
	out.Data = data
	out.Header.Set(schema.HeaderPromptID, p.ID)
	out.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindDeadLetter))
	out.Header.Set(schema.HeaderReason, d.Reason)
	if _, err := b.js.PublishMsg(b.ctx, out, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		b.t.Fatal(err)
	}
	if err := m.TermWithReason(d.Reason); err != nil {
		b.t.Fatal(err)
	}
}

// answer stores the result of the prompt m delivered and acknowledges it.
func (b *bundle) answer(m jetstream.Msg) {
	b.t.Helper()
	p := b.promptOf(m)
	data, err := schema.EncodeResult(&schema.Result{Run: b.run, ID: p.ID, Sample: p.Sample, Messages: p.Messages, Content: "answer", FinishReason: "stop"})
	if err != nil {
		b.t.Fatal(err)
	}
	out := nats.NewMsg(schema.ResultSubject(b.run, p.Unit()))
	out.Data = data
	out.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindResult))
	if _, err := b.js.PublishMsg(b.ctx, out); err != nil {
		b.t.Fatal(err)
	}
	b.ack(m)
}

// Sample 1 of a prompt failed; samples 0 and 2 were answered. A replay
// queues sample 1 alone, on its own subject, with its sample and its
// parameters, resets its failure count only, and leaves the other
// samples' messages and counts as they were.
func TestReplayOneSample(t *testing.T) {
	t.Parallel()
	temp := 0.25
	params := &schema.Params{Temperature: &temp}
	b := setupSamples(t, 3, params, "p")
	msgs := b.fetch(3)
	for _, m := range msgs {
		switch b.promptOf(m).Sample {
		case 1:
			b.deadLetterOf(m, 0)
		default:
			b.answer(m)
		}
	}
	b.settled(0)
	kv, err := provision.AttemptsBucket(b.ctx, b.js, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for sample := range 3 {
		if _, err := kv.Put(b.ctx, schema.AttemptsKey("r", schema.Unit{ID: "p", Sample: sample}), []byte("5")); err != nil {
			t.Fatal(err)
		}
	}
	seqs := map[int]uint64{}
	for sample := range 3 {
		seqs[sample] = b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "p", Sample: sample})).Sequence
	}

	// An ids file naming sample 0 selects nothing: it has no dead letter.
	ids := writeLines(t, t.TempDir(), "ids", `{"id": "p", "sample": 0}`)
	rep, err := Replay(b.ctx, b.js, ReplayConfig{Run: "r", IDsFile: ids, DryRun: true})
	if err != nil || rep.NumReplayed() != 0 || rep.NotSelected != 1 || !reflect.DeepEqual(rep.IDsNotFound, []string{`"p" sample 0`}) {
		t.Fatalf("replay of sample 0: %v, %+v", err, rep)
	}

	rep, err = Replay(b.ctx, b.js, ReplayConfig{Run: "r"})
	if err != nil || rep.NumReplayed() != 1 || !reflect.DeepEqual(rep.FirstUnits, []schema.Unit{{ID: "p", Sample: 1}}) {
		t.Fatalf("replay: %v, %+v", err, rep)
	}
	if out := rep.String(); !strings.Contains(out, `first ids: "p" sample 1`) {
		t.Errorf("report:\n%s", out)
	}
	got := b.fetch(1)
	p := b.promptOf(got[0])
	if p.ID != "p" || p.Sample != 1 || !reflect.DeepEqual(p.Params, params) || got[0].Subject() != schema.PromptSubject("r", schema.Unit{ID: "p", Sample: 1}) {
		t.Errorf("requeued %+v on %s, want sample 1 with its params on its own subject", p, got[0].Subject())
	}
	if h := got[0].Headers().Get(schema.HeaderSample); h != "1" {
		t.Errorf("requeued message's %s header = %q, want 1", schema.HeaderSample, h)
	}
	b.nothingMore()
	for _, sample := range []int{0, 2} {
		if seq := b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "p", Sample: sample})).Sequence; seq != seqs[sample] {
			t.Errorf("sample %d's prompt moved from sequence %d to %d", sample, seqs[sample], seq)
		}
		if _, err := kv.Get(b.ctx, schema.AttemptsKey("r", schema.Unit{ID: "p", Sample: sample})); err != nil {
			t.Errorf("sample %d's failure count: %v, want it kept", sample, err)
		}
	}
	if _, err := kv.Get(b.ctx, schema.AttemptsKey("r", schema.Unit{ID: "p", Sample: 1})); err == nil {
		t.Error("sample 1's failure count was not reset")
	}
	if m := b.stored(schema.DeadStream, schema.DeadSubject("r", schema.Unit{ID: "p", Sample: 1})); m != nil {
		t.Error("sample 1's dead letter stays")
	}
}

// Reconcile counts units: every prompt of the input times the run's
// samples. A unit settled without output is queued again as it was
// queued (read back from the prompts stream, with the parameters the
// input line alone does not show), and one whose message is lost as
// another sample of the prompt was queued, with its own sample. A line of
// completions.jsonl without "sample" is sample 0.
func TestReconcileSamples(t *testing.T) {
	t.Parallel()
	temp := 0.25
	params := &schema.Params{Temperature: &temp}
	b := setupSamples(t, 2, params, "a", "b")
	for _, m := range b.fetch(4) {
		b.ack(m) // a/0 and b/1 are answered below; a/1 and b/0 lose theirs
	}
	b.settled(0)
	r := b.requeuer()
	if err := r.prompts.DeleteMsg(b.ctx, b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "b"})).Sequence); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var lines []any
	for _, id := range []string{"a", "b"} {
		lines = append(lines, map[string]any{"id": id, "messages": prompt(id).Messages})
	}
	f := &reconcileFixture{bundle: b, input: writeLines(t, dir, "in.jsonl", lines...)}
	data := filepath.Join(dir, "data")
	writeLines(t, data, "r/completions.jsonl", `{"id": "a", "content": "answer"}`, `{"id": "b", "sample": 1, "content": "answer"}`)

	rep, err := Reconcile(b.ctx, b.js, f.config(data, false))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Input != 2 || rep.Samples != 2 || rep.Units != 4 || rep.Total != 4 || rep.Completed != 2 || rep.RequeuedSettled != 1 || rep.RequeuedMissing != 1 {
		t.Fatalf("report %+v", rep)
	}
	if !reflect.DeepEqual(rep.FirstRequeued, []schema.Unit{{ID: "a", Sample: 1}, {ID: "b"}}) {
		t.Errorf("requeued %+v, want a sample 1 and b sample 0", rep.FirstRequeued)
	}
	if out := rep.String(); !strings.Contains(out, "2 samples each: 4 units") || strings.Contains(out, "note: the input has") {
		t.Errorf("report:\n%s", out)
	}
	got := map[string]*schema.Prompt{}
	for _, m := range b.fetch(2) {
		p := b.promptOf(m)
		got[schema.Unit{ID: p.ID, Sample: p.Sample}.Key()] = p
	}
	b.nothingMore()
	for _, u := range []schema.Unit{{ID: "a", Sample: 1}, {ID: "b"}} {
		p := got[u.Key()]
		if p == nil {
			t.Errorf("%+v not delivered: %v", u, got)
			continue
		}
		if !reflect.DeepEqual(p.Params, params) {
			pj, _ := json.Marshal(p.Params)
			t.Errorf("%+v requeued with params %s, want the queued ones", u, pj)
		}
	}
}

// The samples of a prompt queued in one message are queued, or in
// flight, with it: reconcile leaves them to it. Once it is settled, a
// sample without output is queued again on its own.
func TestReconcileSamplesInOneMessage(t *testing.T) {
	t.Parallel()
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	b := &bundle{t: t, ctx: ctx, js: js, run: "r"}
	ps := []schema.Prompt{prompt("a"), prompt("b")}
	for i := range ps {
		ps[i].Samples = 3
	}
	brokertest.Queue(t, js, schema.Manifest{Run: "r", Samples: 3, SamplesPerMessage: 3, Prompts: 2}, ps)
	cons, err := provision.WorkersConsumer(ctx, js, "r", provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.cons = cons
	dir := t.TempDir()
	var lines []any
	for _, id := range []string{"a", "b"} {
		lines = append(lines, map[string]any{"id": id, "messages": prompt(id).Messages})
	}
	f := &reconcileFixture{bundle: b, input: writeLines(t, dir, "in.jsonl", lines...)}
	data := filepath.Join(dir, "data")
	writeLines(t, data, "r/completions.jsonl", `{"id": "a", "sample": 1, "content": "answer"}`)

	rep, err := Reconcile(ctx, js, f.config(data, false))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Units != 6 || rep.Completed != 1 || rep.Queued != 5 || rep.Requeued() != 0 {
		t.Fatalf("queued messages of 3 samples: report %+v, want 5 units queued with them and none requeued", rep)
	}

	// a's message settled without two of its samples' output: those are
	// queued again, each alone.
	m := b.fetch(1)[0]
	if p := b.promptOf(m); p.ID != "a" {
		t.Fatalf("first delivery %s", p.ID)
	}
	b.ack(m)
	b.settled(0)
	rep, err = Reconcile(ctx, js, f.config(data, false))
	if err != nil {
		t.Fatal(err)
	}
	if rep.RequeuedSettled != 2 || rep.Queued != 3 {
		t.Fatalf("after a's message settled: report %+v, want 2 requeued and b's 3 still queued", rep)
	}
	var again []int
	for _, m := range b.fetch(3) {
		p := b.promptOf(m)
		switch {
		case p.ID == "b" && p.SampleCount() == 3:
		case p.ID == "a" && p.SampleCount() == 1:
			again = append(again, p.Sample)
		default:
			t.Errorf("delivered %s sample %d asking for %d samples", p.ID, p.Sample, p.SampleCount())
		}
	}
	if !reflect.DeepEqual(again, []int{0, 2}) {
		t.Errorf("requeued a's samples %v, want 0 and 2 each alone", again)
	}
}

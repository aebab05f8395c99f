package requeue

import (
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// A prompt the consumer terminated (dead-lettered) or acknowledged is
// delivered again through the same durable consumer once requeued, and its
// dead letter is gone.
func TestRequeueDeliversAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "p1", "p2")
	first := b.fetch(2)
	b.fail(first[0], schema.ReasonPermanent)
	b.ack(first[1])
	b.settled(0)
	b.nothingMore()
	oldSeq := b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "p1"})).Sequence

	for _, id := range []string{"p1", "p2"} {
		p := prompt(id)
		if err := Requeue(b.ctx, b.js, "r", &p, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	again := b.fetch(2)
	sameIDs(t, "delivered again", ids(again), "p1", "p2")
	for _, m := range again {
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if meta.NumDelivered != 1 || meta.Sequence.Stream <= oldSeq {
			t.Errorf("redelivery: delivery %d at sequence %d, want a first delivery after sequence %d", meta.NumDelivered, meta.Sequence.Stream, oldSeq)
		}
		h := m.Headers()
		id := h.Get(schema.HeaderPromptID)
		if !strings.HasPrefix(h.Get(schema.HeaderMsgID), schema.MsgID("r", schema.Unit{ID: id})+"/r") || h.Get(schema.HeaderRun) != "r" ||
			h.Get(schema.HeaderSchema) != schema.SchemaHeader(schema.KindPrompt) || h.Get(schema.HeaderContentType) != schema.ContentTypeMsgpack {
			t.Errorf("headers of the requeued prompt: %v", h)
		}
		b.ack(m)
	}
	if b.stored(schema.DeadStream, schema.DeadSubject("r", schema.Unit{ID: "p1"})) != nil {
		t.Error("dead letter of p1 is still stored")
	}
	if n := b.states()[0].msgs; n != 2 {
		t.Errorf("prompts stream holds %d messages, want 2 (one per prompt)", n)
	}
	b.nothingMore()
}

// A crash after the purge leaves the subject empty and the dead letter in
// place; requeueing again publishes the prompt once and removes the dead
// letter.
func TestRequeueConvergesAfterCrashAfterPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "p1")
	b.fail(b.fetch(1)[0], schema.ReasonExhausted)
	b.settled(0)
	r := b.requeuer()
	subject := schema.PromptSubject("r", schema.Unit{ID: "p1"})
	if err := r.purge(b.ctx, r.prompts, b.stored(schema.PromptsStream, subject)); err != nil {
		t.Fatal(err)
	}
	// The crash: nothing more happens. The dead letter is still there,
	// so a replay finds the prompt.
	if b.stored(schema.DeadStream, schema.DeadSubject("r", schema.Unit{ID: "p1"})) == nil {
		t.Fatal("dead letter gone after the first step")
	}
	p := prompt("p1")
	outcome, err := r.Requeue(b.ctx, &p)
	if err != nil || outcome != Published {
		t.Fatalf("requeue after the crash: %v, %v; want published", outcome, err)
	}
	sameIDs(t, "delivered", ids(b.fetch(1)), "p1")
	b.nothingMore()
	if b.stored(schema.DeadStream, schema.DeadSubject("r", schema.Unit{ID: "p1"})) != nil {
		t.Error("dead letter still stored")
	}
}

// A crash after the new copy is published, before the dead letter is
// removed: requeueing again recognises the copy, publishes nothing and
// removes the dead letter. The prompt is delivered once.
func TestRequeueConvergesAfterCrashAfterPublish(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "p1")
	b.fail(b.fetch(1)[0], schema.ReasonPermanent)
	b.settled(0)
	r := b.requeuer()
	subject := schema.PromptSubject("r", schema.Unit{ID: "p1"})
	if err := r.purge(b.ctx, r.prompts, b.stored(schema.PromptsStream, subject)); err != nil {
		t.Fatal(err)
	}
	p := prompt("p1")
	if _, err := r.publish(b.ctx, &p); err != nil {
		t.Fatal(err)
	}
	copySeq := b.stored(schema.PromptsStream, subject).Sequence
	// The crash, then a rerun.
	outcome, err := r.Requeue(b.ctx, &p)
	if err != nil || outcome != AlreadyQueued {
		t.Fatalf("requeue after the crash: %v, %v; want already queued", outcome, err)
	}
	if seq := b.stored(schema.PromptsStream, subject).Sequence; seq != copySeq {
		t.Fatalf("the queued copy was replaced: sequence %d, was %d", seq, copySeq)
	}
	if b.stored(schema.DeadStream, schema.DeadSubject("r", schema.Unit{ID: "p1"})) != nil {
		t.Error("dead letter still stored")
	}
	sameIDs(t, "delivered", ids(b.fetch(1)), "p1")
	b.nothingMore()
}

// A crash after the publish, and the copy failed again before the rerun
// (its own dead letter was refused: the old one was still there). The
// rerun sees that the consumer settled the copy and queues it anew rather
// than leave it with no dead letter.
func TestRequeueAfterCrashRequeuesACopyThatFailedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "p1")
	b.fail(b.fetch(1)[0], schema.ReasonPermanent)
	b.settled(0)
	r := b.requeuer()
	subject := schema.PromptSubject("r", schema.Unit{ID: "p1"})
	if err := r.purge(b.ctx, r.prompts, b.stored(schema.PromptsStream, subject)); err != nil {
		t.Fatal(err)
	}
	p := prompt("p1")
	if _, err := r.publish(b.ctx, &p); err != nil {
		t.Fatal(err)
	}
	b.fail(b.fetch(1)[0], schema.ReasonPermanent)
	b.settled(0)
	outcome, err := r.Requeue(b.ctx, &p)
	if err != nil || outcome != Published {
		t.Fatalf("requeue: %v, %v; want published", outcome, err)
	}
	sameIDs(t, "delivered", ids(b.fetch(1)), "p1")
	b.nothingMore()
}

// A prompt message lost from the store is published fresh.
func TestRequeuePublishesALostPrompt(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "p1", "p2")
	r := b.requeuer()
	subject := schema.PromptSubject("r", schema.Unit{ID: "p1"})
	if err := r.prompts.DeleteMsg(b.ctx, b.stored(schema.PromptsStream, subject).Sequence); err != nil {
		t.Fatal(err)
	}
	p := prompt("p1")
	p.Source = "prompts.jsonl:1"
	if outcome, err := r.Requeue(b.ctx, &p); err != nil || outcome != Published {
		t.Fatalf("requeue: %v, %v", outcome, err)
	}
	got := b.fetch(2)
	sameIDs(t, "delivered", ids(got), "p1", "p2")
	stored, err := schema.DecodePrompt(b.stored(schema.PromptsStream, subject).Data)
	if err != nil || stored.Source != "prompts.jsonl:1" || stored.Run != "r" {
		t.Fatalf("stored prompt %+v, %v", stored, err)
	}
}

// A requeued prompt keeps the input position of the copy it replaces.
func TestRequeueKeepsSource(t *testing.T) {
	t.Parallel()
	b := setup(t, "r")
	p := prompt("p1")
	p.Source = "in.jsonl:7"
	r := b.requeuer()
	if _, err := r.Requeue(b.ctx, &p); err != nil {
		t.Fatal(err)
	}
	b.ack(b.fetch(1)[0])
	b.settled(0)
	bare := prompt("p1")
	if _, err := r.Requeue(b.ctx, &bare); err != nil {
		t.Fatal(err)
	}
	stored, err := schema.DecodePrompt(b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "p1"})).Data)
	if err != nil || stored.Source != "in.jsonl:7" {
		t.Fatalf("stored prompt %+v, %v; want source in.jsonl:7", stored, err)
	}
	if bare.Source != "" || bare.Run != "" {
		t.Errorf("Requeue changed its argument: %+v", bare)
	}
}

func TestRequeueRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "p1")
	r := b.requeuer()
	other := prompt("p1")
	other.Run = "elsewhere"
	for name, p := range map[string]*schema.Prompt{
		"nil":         nil,
		"no id":       {Messages: prompt("x").Messages},
		"no messages": {ID: "p1"},
		"other run":   &other,
	} {
		if _, err := r.Requeue(b.ctx, p); err == nil {
			t.Errorf("%s: requeued", name)
		}
	}
	_, err := New(b.ctx, b.js, "nosuchrun", Options{})
	if err == nil || !strings.Contains(err.Error(), "no manifest") {
		t.Errorf("unknown run: %v", err)
	}
	if _, err := New(b.ctx, b.js, "r", Options{Attempts: -1}); err == nil {
		t.Error("negative attempts accepted")
	}
}

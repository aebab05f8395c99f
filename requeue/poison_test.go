package requeue

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/schema"
)

// Answers cut at max_tokens and dead-lettered as truncated can be
// replayed by that reason, with a larger max_tokens, as documented.
func TestReplayTruncated(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "long-1", "short-1")
	msgs := b.fetch(2)
	b.fail(msgs[0], schema.ReasonTruncated)
	b.fail(msgs[1], schema.ReasonPermanent)
	b.settled(0)
	cfg := ReplayConfig{Run: "r", Reasons: []string{schema.ReasonTruncated}, MaxTokens: 65536}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("--reason truncated refused: %v", err)
	}
	rep, err := Replay(b.ctx, b.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.NumReplayed() != 1 || rep.Replayed[schema.ReasonTruncated] != 1 || rep.NotSelected != 1 {
		t.Fatalf("report %+v, want the truncated one replayed", rep)
	}
	got := b.fetch(1)
	p, err := schema.DecodePrompt(got[0].Data())
	if err != nil || p.ID != "long-1" || p.MaxTokens != 65536 {
		t.Fatalf("queued again: %+v (%v), want long-1 with max_tokens 65536", p, err)
	}
}

// A prompt whose stored answer cannot be read was dead-lettered as poison
// by the aggregator, with its prompt. Replay removes the unreadable answer
// (else the new one could not be stored) and queues the prompt again,
// instead of skipping it as answered.
func TestReplayUnreadableResult(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "bad-1")
	msgs := b.fetch(1)
	garbage := nats.NewMsg(schema.ResultSubject("r", schema.Unit{ID: "bad-1"}))
	garbage.Data = []byte("not msgpack")
	garbage.Header.Set(schema.HeaderPromptID, "bad-1")
	if _, err := b.js.PublishMsg(b.ctx, garbage); err != nil {
		t.Fatal(err)
	}
	b.ack(msgs[0])
	b.deadLetter("r", "bad-1", prompt("bad-1").Messages, schema.ReasonPoison)

	rep, err := Replay(b.ctx, b.js, ReplayConfig{Run: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NumReplayed() != 1 || rep.Completed != 0 {
		t.Fatalf("report %+v, want bad-1 replayed, not skipped as completed", rep)
	}
	if m := b.stored(schema.ResultsStream, schema.ResultSubject("r", schema.Unit{ID: "bad-1"})); m != nil {
		t.Errorf("the unreadable answer is still stored")
	}
	if m := b.stored(schema.DeadStream, schema.DeadSubject("r", schema.Unit{ID: "bad-1"})); m != nil {
		t.Errorf("the dead letter is still stored")
	}
	if got := b.fetch(1); len(got) != 1 || got[0].Headers().Get(schema.HeaderPromptID) != "bad-1" {
		t.Errorf("bad-1 is not queued again")
	}
}

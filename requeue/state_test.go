package requeue

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	// Messages 1-10 delivered, 1-4 settled, 2 pending.
	busy := &jetstream.ConsumerInfo{
		Delivered: jetstream.SequenceInfo{Stream: 10}, AckFloor: jetstream.SequenceInfo{Stream: 4}, NumAckPending: 2,
	}
	idle := &jetstream.ConsumerInfo{
		Delivered: jetstream.SequenceInfo{Stream: 10}, AckFloor: jetstream.SequenceInfo{Stream: 10},
	}
	for _, c := range []struct {
		name    string
		seq     uint64
		workers *jetstream.ConsumerInfo
		want    State
	}{
		{"no message", 0, busy, Missing},
		{"no consumer yet", 3, nil, Queued},
		{"beyond delivered", 11, busy, Queued},
		{"at the ack floor", 4, busy, Settled},
		{"below the ack floor", 1, busy, Settled},
		{"just above the ack floor", 5, busy, InFlight},
		{"last delivered", 10, busy, InFlight},
		{"all delivered settled", 7, idle, Settled},
		{"pending count zero, floor behind", 7, &jetstream.ConsumerInfo{Delivered: jetstream.SequenceInfo{Stream: 10}, AckFloor: jetstream.SequenceInfo{Stream: 3}}, Settled},
		{"beyond delivered, idle", 11, idle, Queued},
	} {
		if got := Classify(c.seq, c.workers); got != c.want {
			t.Errorf("%s: Classify(%d) = %v, want %v", c.name, c.seq, got, c.want)
		}
	}
}

// The rule against a real consumer: a prompt acknowledged above one still
// pending counts as in flight (the documented limit) until the one below
// is settled.
func TestPromptStateFollowsTheConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t, "r", "acked", "pending", "acked-above", "queued", "lost")
	r := b.requeuer()
	if err := r.prompts.DeleteMsg(b.ctx, b.stored(schema.PromptsStream, schema.PromptSubject("r", schema.Unit{ID: "lost"})).Sequence); err != nil {
		t.Fatal(err)
	}
	got := b.fetch(3)
	b.ack(got[0])
	b.ack(got[2])
	check := func(want map[string]State) {
		t.Helper()
		workers, err := r.Workers(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for id, w := range want {
			s, err := r.PromptState(b.ctx, schema.Unit{ID: id}, workers)
			if err != nil || s != w {
				t.Errorf("%s: %v, %v; want %v", id, s, err, w)
			}
		}
	}
	check(map[string]State{"acked": Settled, "pending": InFlight, "acked-above": InFlight, "queued": Queued, "lost": Missing})
	b.ack(got[1])
	check(map[string]State{"pending": Settled, "acked-above": Settled, "queued": Queued})

	// Before any worker or produce creates the consumer, nothing has
	// been delivered.
	if err := b.js.DeleteConsumer(b.ctx, schema.PromptsStream, schema.WorkersConsumer("r")); err != nil {
		t.Fatal(err)
	}
	check(map[string]State{"acked": Queued, "lost": Missing})
}

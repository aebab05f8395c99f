package worker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// queueHints reads the hint of the prompt a consumer delivers next and
// the mean hint of a sample of those left, skipping the other runs'
// prompts in the stream.
func TestQueueHints(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, run := range []string{"other", "hinted"} {
		if _, err := provision.WorkersConsumer(ctx, js, run, provision.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	// The other run's prompts first, then 16 with hints 1600, 1500, ...
	// 100: longest first.
	brokertest.Queue(t, js, schema.Manifest{Run: "other"}, brokertest.Prompts(5))
	ps := brokertest.Prompts(16)
	for i := range ps {
		ps[i].LengthHint = 100 * (16 - i)
	}
	brokertest.Queue(t, js, schema.Manifest{Run: "hinted"}, ps)
	c := &controller{store: &store{}}
	var err error
	if c.store.prompts, err = js.Stream(ctx, schema.PromptsStream); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, schema.PromptsStream, schema.WorkersConsumer("hinted"))
	if err != nil {
		t.Fatal(err)
	}
	// The server counts a consumer's pending messages as they are stored,
	// a moment after the publish is acknowledged.
	var info *jetstream.ConsumerInfo
	brokertest.Eventually(t, 10*time.Second, func() bool {
		info, err = cons.Info(ctx)
		return err == nil && info.NumPending == 16
	}, "the consumer did not count its 16 prompts")
	k := &policy.Consumer{Pending: info.NumPending, Delivered: info.Delivered.Stream, Filter: info.Config.FilterSubject}
	next, mean := c.queueHints(ctx, k)
	// Eight samples, two prompts apart: 1600, 1400, ... 200.
	if next != 1600 || mean != 900 {
		t.Errorf("next hint %d, mean %v; want 1600 and 900", next, mean)
	}
	// Four delivered: the sample starts at the fifth and takes 8 of the
	// 12 left, 1.5 apart: 1200, 1100, 900, 800, 600, 500, 300, 200.
	k.Pending, k.Delivered = 12, k.Delivered+5+4
	if next, mean := c.queueHints(ctx, k); next != 1200 || mean != 700 {
		t.Errorf("after four delivered: next hint %d, mean %v; want 1200 and 700", next, mean)
	}
	if next, mean := c.queueHints(ctx, &policy.Consumer{Pending: 3}); next != -1 || mean != 0 {
		t.Errorf("without a filter: %d, %v; want -1, 0", next, mean)
	}
}

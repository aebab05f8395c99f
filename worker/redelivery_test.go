package worker_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// takeFirstDelivery fetches one prompt from the run's consumer and leaves
// it unacknowledged, as a worker that dies holding it: JetStream delivers
// it again once AckWait has passed.
func (b *bundle) takeFirstDelivery(t *testing.T) (jetstream.Msg, *jetstream.MsgMetadata) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := b.js.Consumer(ctx, schema.PromptsStream, schema.WorkersConsumer(b.run))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("no prompt delivered: %v", batch.Error())
	}
	meta, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return m, meta
}

// A prompt whose worker stored its result and died before acknowledging
// is, when delivered again, acknowledged with that result: it is not
// generated a second time.
func TestRedeliveredPromptWithStoredResultIsNotGenerated(t *testing.T) {
	b := setup(t, 3, provision.Options{AckWait: 300 * time.Millisecond})
	msg, _ := b.takeFirstDelivery(t)
	id := msg.Headers().Get(schema.HeaderPromptID)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	data, err := schema.EncodeResult(&schema.Result{Run: b.run, ID: id, Content: "the first answer", Worker: "died", Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(ctx, schema.ResultSubject(b.run, schema.Unit{ID: id}), data); err != nil {
		t.Fatal(err)
	}

	f, url := newFakeLLM(t, &fakeLLM{})
	w, _ := b.start(t, worker.Config{Window: 5}, url)
	b.waitSettled(t, 20*time.Second)
	waitCounted(t, 3, w)
	if got := f.count("question " + id); got != 0 {
		t.Errorf("%s was generated %d times although its result was stored", id, got)
	}
	if res := b.results(t); len(res) != 3 || res[id].Content != "the first answer" {
		t.Errorf("%d results, %s = %q; want 3 and the stored answer kept", len(res), id, res[id].Content)
	}
	if s := w.Stats(); s.AlreadySettled != 1 || s.Completed != 2 {
		t.Errorf("stats %+v: want 1 settled from the stored result and 2 completed", s)
	}
}

// A redelivered prompt whose earlier result cannot be looked up (here the
// results stream is gone for a while) is handed back to look again, not
// generated: under a loaded or failing JetStream a failed look-up would
// otherwise cost a whole answer, only for it to be discarded once the
// stored one is found.
func TestFailedLookupHandsTheRedeliveryBack(t *testing.T) {
	b := setup(t, 1, provision.Options{AckWait: 300 * time.Millisecond})
	msg, _ := b.takeFirstDelivery(t)
	id := msg.Headers().Get(schema.HeaderPromptID)
	handedBack := &countingHandler{match: "cannot store or read what a delivery keeps in JetStream; prompt handed back to continue later"}
	f, url := newFakeLLM(t, &fakeLLM{})
	hb := b.heartbeats(t)
	b.start(t, worker.Config{Window: 2, RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: slog.New(handedBack)}, url)
	brokertest.Eventually(t, 10*time.Second, func() bool { return hb.workers() == 1 }, "the worker to have started")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.js.DeleteStream(ctx, schema.ResultsStream); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 20*time.Second, func() bool { return handedBack.n.Load() >= 2 }, "the redelivered prompt to be handed back twice")
	if n := f.count("question " + id); n != 0 {
		t.Fatalf("%s was generated %d times while its earlier result could not be looked up", id, n)
	}
	if err := provision.Streams(ctx, b.js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	data, err := schema.EncodeResult(&schema.Result{Run: b.run, ID: id, Content: "the first answer", Worker: "died", Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(ctx, schema.ResultSubject(b.run, schema.Unit{ID: id}), data); err != nil {
		t.Fatal(err)
	}
	b.waitSettled(t, 20*time.Second)
	if n := f.count("question " + id); n != 0 {
		t.Errorf("%s was generated %d times although its result was stored", id, n)
	}
	if res := b.results(t); res[id] == nil || res[id].Content != "the first answer" {
		t.Errorf("result of %s: %+v, want the stored answer kept", id, res[id])
	}
}

// A prompt dead-lettered on an earlier delivery whose Term was lost (its
// worker died right after storing the dead letter) is terminated at once
// when it comes again, not generated up to MaxDeliver times.
func TestRedeliveredDeadLetterIsSettledAtOnce(t *testing.T) {
	b := setup(t, 2, provision.Options{AckWait: 300 * time.Millisecond, MaxDeliver: 10})
	msg, meta := b.takeFirstDelivery(t)
	id := msg.Headers().Get(schema.HeaderPromptID)
	token := schema.SubjectToken(id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	data, err := schema.EncodeDeadLetter(&schema.DeadLetter{Run: b.run, ID: id, Reason: schema.ReasonPermanent,
		Status: 400, Error: "context too long", Attempts: 1, Worker: "died", PromptSeq: meta.Sequence.Stream})
	if err != nil {
		t.Fatal(err)
	}
	dl := nats.NewMsg(schema.DeadSubject(b.run, schema.Unit{ID: id}))
	dl.Data = data
	dl.Header.Set(schema.HeaderMsgID, schema.DeadMsgID(b.run, token, meta.Sequence.Stream, 1))
	dl.Header.Set(schema.HeaderPromptSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
	dl.Header.Set(schema.HeaderReason, schema.ReasonPermanent)
	if _, err := b.js.PublishMsg(ctx, dl); err != nil {
		t.Fatal(err)
	}

	// The backend refuses the prompt as the first time: were it asked,
	// the worker would find the stored dead letter and hand it back, again
	// and again.
	f, url := newFakeLLM(t, &fakeLLM{status: func(prompt string, _ int) int {
		if strings.HasSuffix(prompt, id) {
			return 400
		}
		return 200
	}})
	w, _ := b.start(t, worker.Config{Window: 5, OutageRetry: 20 * time.Millisecond}, url)
	b.waitSettled(t, 20*time.Second)
	waitCounted(t, 2, w)
	if got := f.count("question " + id); got != 0 {
		t.Errorf("%s was sent to the backend %d times although its dead letter was stored", id, got)
	}
	if dead := deadLetters(t, b); len(dead) != 1 || dead[id] == nil || dead[id].Worker != "died" {
		t.Errorf("dead letters %v: want the first one only", dead)
	}
	if s := w.Stats(); s.AlreadySettled != 1 || s.Completed != 1 {
		t.Errorf("stats %+v: want 1 settled from its dead letter, 1 completed", s)
	}
}

// Progress acks go on until the prompt is settled: while the results
// stream cannot store the answer for several AckWaits (here it is gone
// for a while), the prompt stays with its worker instead of being
// delivered to a second one and generated again.
func TestProgressAcksLastUntilTheResultIsStored(t *testing.T) {
	b := setup(t, 1, provision.Options{AckWait: 400 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	retries := &countingHandler{match: "publish failed; retrying"}
	hold := make(chan struct{})
	f1, url1 := newFakeLLM(t, &fakeLLM{hold: hold})
	f2, url2 := newFakeLLM(t, &fakeLLM{hold: hold})
	hb := b.heartbeats(t)
	b.start(t, worker.Config{Window: 1, Logger: slog.New(retries)}, url1)
	b.start(t, worker.Config{Window: 1, Logger: slog.New(retries)}, url2)
	brokertest.Eventually(t, 10*time.Second, func() bool {
		a, _ := f1.snapshot()
		c, _ := f2.snapshot()
		return a+c == 1
	}, "the prompt to be generating")
	// Both workers must be past start-up, where a missing results stream
	// is an error (run `aerie produce` first), before it goes: the one
	// without the prompt may still be starting.
	brokertest.Eventually(t, 10*time.Second, func() bool { return hb.workers() == 2 }, "both workers to have started")
	if err := b.js.DeleteStream(ctx, schema.ResultsStream); err != nil {
		t.Fatal(err)
	}
	close(hold)
	// Five failed publishes span about 3 s: more than 7 AckWaits.
	brokertest.Eventually(t, 30*time.Second, func() bool { return retries.n.Load() >= 5 }, "five failed attempts to store the result")
	if err := provision.Streams(ctx, b.js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	b.waitSettled(t, 30*time.Second)
	if n1, n2 := f1.count("question p0000"), f2.count("question p0000"); n1+n2 != 1 {
		t.Errorf("the prompt was generated %d times (%d and %d), want once", n1+n2, n1, n2)
	}
	if rd := b.consumer(t).NumRedelivered; rd != 0 {
		t.Errorf("consumer redelivered %d prompts, want none", rd)
	}
}

// countingHandler counts log records whose message is match.
type countingHandler struct {
	match string
	n     atomic.Int64
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.match {
		h.n.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

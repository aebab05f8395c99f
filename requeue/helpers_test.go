package requeue

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// bundle is one test's broker with a queued run and its workers'
// consumer, standing in for the workers.
type bundle struct {
	t    *testing.T
	ctx  context.Context
	js   jetstream.JetStream
	run  string
	cons jetstream.Consumer
}

// setup starts a broker and queues prompts with the given ids for run,
// in that order, the way the producer does.
func setup(t *testing.T, run string, ids ...string) *bundle {
	t.Helper()
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	b := &bundle{t: t, ctx: ctx, js: js, run: run}
	b.queue(run, ids...)
	cons, err := provision.WorkersConsumer(ctx, js, run, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.cons = cons
	return b
}

// queue writes the manifest of run and queues prompts with the given ids.
func (b *bundle) queue(run string, ids ...string) {
	b.t.Helper()
	ps := make([]schema.Prompt, len(ids))
	for i, id := range ids {
		ps[i] = prompt(id)
	}
	brokertest.Queue(b.t, b.js, schema.Manifest{Run: run}, ps)
}

func prompt(id string) schema.Prompt {
	return schema.Prompt{ID: id, Messages: []schema.Message{{Role: "user", Content: "question " + id}}}
}

// fetch takes exactly n prompts from the workers' consumer, as a worker
// would, in delivery order.
func (b *bundle) fetch(n int) []jetstream.Msg {
	b.t.Helper()
	var got []jetstream.Msg
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		batch, err := b.cons.Fetch(n-len(got), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.t.Fatal(err)
		}
		for m := range batch.Messages() {
			got = append(got, m)
		}
	}
	if len(got) != n {
		b.t.Fatalf("fetched %d prompts, want %d", len(got), n)
	}
	return got
}

// nothingMore checks that the consumer has no prompt to deliver.
func (b *bundle) nothingMore() {
	b.t.Helper()
	info, err := b.cons.Info(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	if info.NumPending != 0 {
		b.t.Fatalf("consumer has %d more prompts to deliver, want none", info.NumPending)
	}
	batch, err := b.cons.FetchNoWait(10)
	if err != nil {
		b.t.Fatal(err)
	}
	for m := range batch.Messages() {
		b.t.Fatalf("prompt %q delivered again", m.Headers().Get(schema.HeaderPromptID))
	}
}

// ids lists the prompt ids of delivered messages.
func ids(msgs []jetstream.Msg) []string {
	var out []string
	for _, m := range msgs {
		p, err := schema.DecodePrompt(m.Data())
		if err != nil {
			out = append(out, "undecodable")
			continue
		}
		out = append(out, p.ID)
	}
	return out
}

// unitIDs lists the ids of units.
func unitIDs(units []schema.Unit) []string {
	out := make([]string, len(units))
	for i, u := range units {
		out[i] = u.ID
	}
	return out
}

func sameIDs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(g, w) {
		t.Fatalf("%s: got %q, want %q", what, g, w)
	}
}

// ack acknowledges m and waits for the server to confirm.
func (b *bundle) ack(m jetstream.Msg) {
	b.t.Helper()
	if err := m.DoubleAck(b.ctx); err != nil {
		b.t.Fatal(err)
	}
}

// fail does what a worker does with a prompt it gives up: store a dead
// letter (a dead letter already there stays), then terminate delivery.
func (b *bundle) fail(m jetstream.Msg, reason string) {
	b.t.Helper()
	p, err := schema.DecodePrompt(m.Data())
	if err != nil {
		b.t.Fatal(err)
	}
	b.deadLetter(b.run, p.ID, p.Messages, reason)
	if err := m.TermWithReason(reason); err != nil {
		b.t.Fatal(err)
	}
}

// deadLetter stores a dead letter the way a worker does.
func (b *bundle) deadLetter(run, id string, msgs []schema.Message, reason string) {
	b.t.Helper()
	data, err := schema.EncodeDeadLetter(&schema.DeadLetter{
		Run: run, ID: id, Messages: msgs, Reason: reason, Error: "test failure",
		Attempts: 1, Worker: "test", FailedAt: time.Now().UTC(),
	})
	if err != nil {
		b.t.Fatal(err)
	}
	subject := schema.DeadSubject(run, schema.Unit{ID: id})
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(schema.HeaderMsgID, schema.MsgID(run, schema.Unit{ID: id}))
	m.Header.Set(schema.HeaderPromptID, id)
	m.Header.Set(schema.HeaderRun, run)
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindDeadLetter))
	m.Header.Set(schema.HeaderReason, reason)
	if _, err := b.js.PublishMsg(b.ctx, m, jetstream.WithExpectLastSequencePerSubject(0)); err != nil && !provision.IsAlreadyStored(err) {
		b.t.Fatal(err)
	}
}

// result stores an answer the way a worker does.
func (b *bundle) result(id string) {
	b.t.Helper()
	p := prompt(id)
	data, err := schema.EncodeResult(&schema.Result{Run: b.run, ID: id, Messages: p.Messages, Model: "test-model", Content: "answer", FinishReason: "stop"})
	if err != nil {
		b.t.Fatal(err)
	}
	m := nats.NewMsg(schema.ResultSubject(b.run, schema.Unit{ID: id}))
	m.Data = data
	m.Header.Set(schema.HeaderMsgID, schema.MsgID(b.run, schema.Unit{ID: id}))
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindResult))
	if _, err := b.js.PublishMsg(b.ctx, m, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		b.t.Fatal(err)
	}
}

// settled waits until the consumer counts pending prompts: terminations
// are not confirmed by the server, so the test waits to see them.
func (b *bundle) settled(pending int) {
	b.t.Helper()
	brokertest.Eventually(b.t, 10*time.Second, func() bool {
		info, err := b.cons.Info(b.ctx)
		return err == nil && info.NumAckPending == pending
	}, "%d prompts pending", pending)
}

func (b *bundle) requeuer() *Requeuer {
	b.t.Helper()
	r, err := New(b.ctx, b.js, b.run, Options{})
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

// stored returns the message on a prompt's subject in stream, nil if none.
func (b *bundle) stored(stream, subject string) *jetstream.RawStreamMsg {
	b.t.Helper()
	s, err := b.js.Stream(b.ctx, stream)
	if err != nil {
		b.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(b.ctx, subject)
	if err != nil && err != jetstream.ErrMsgNotFound {
		b.t.Fatal(err)
	}
	return m
}

// states returns message counts and last sequences of aerie's three
// streams, to show that nothing changed.
func (b *bundle) states() [3]streamCounts {
	b.t.Helper()
	var out [3]streamCounts
	for i, name := range []string{schema.PromptsStream, schema.ResultsStream, schema.DeadStream} {
		s, err := b.js.Stream(b.ctx, name)
		if err != nil {
			b.t.Fatal(err)
		}
		st := s.CachedInfo().State
		out[i] = streamCounts{msgs: st.Msgs, first: st.FirstSeq, last: st.LastSeq}
	}
	return out
}

type streamCounts struct{ msgs, first, last uint64 }

// writeLines writes JSON lines (values are marshalled; strings are
// written as they are) to a file in a temporary directory.
func writeLines(t *testing.T, dir, name string, lines ...any) string {
	t.Helper()
	var data []byte
	for _, l := range lines {
		if s, ok := l.(string); ok {
			data = append(data, s...)
		} else {
			b, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, b...)
		}
		data = append(data, '\n')
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// appendTo appends s to the file at path, without a newline.
func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

package provision_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// A prompt published twice, inside the de-duplication window or after it
// (simulated here by a different Nats-Msg-Id), is stored once, and the
// second publish is recognised as "already stored".
func TestSecondPublishIsAlreadyStored(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subj := schema.PromptSubject("r", schema.Unit{ID: "p1"})
	msg := func(id string) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = []byte("x")
		m.Header.Set(schema.HeaderMsgID, id)
		return m
	}
	if _, err := js.PublishMsg(ctx, msg("a"), jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(ctx, msg("a"))
	if err != nil || !ack.Duplicate {
		t.Fatalf("same id: want duplicate ack, got %+v, %v", ack, err)
	}
	_, err = js.PublishMsg(ctx, msg("a"), jetstream.WithExpectLastSequencePerSubject(0))
	if !provision.IsAlreadyStored(err) {
		t.Fatalf("same id, expected-last-sequence 0: want already stored, got %v", err)
	}
	_, err = js.PublishMsg(ctx, msg("b"), jetstream.WithExpectLastSequencePerSubject(0))
	if !provision.IsAlreadyStored(err) {
		t.Fatalf("new id, expected-last-sequence 0: want already stored, got %v", err)
	}
	_, err = js.PublishMsg(ctx, msg("c"))
	if !provision.IsAlreadyStored(err) {
		t.Fatalf("new id, no expectation: want already stored, got %v", err)
	}
	info, err := js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
	if provision.IsAlreadyStored(context.DeadlineExceeded) {
		t.Fatal("a timeout is not 'already stored'")
	}
}

// Provisioning twice is harmless and keeps an operator's changes.
func TestProvisionIsIdempotent(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := provision.WorkersConsumer(ctx, js, "r", provision.Options{AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.AckWait; got != 5*time.Second {
		t.Fatalf("AckWait = %v", got)
	}
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	c, err = provision.WorkersConsumer(ctx, js, "r", provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.AckWait; got != 5*time.Second {
		t.Fatalf("existing consumer was overridden: AckWait = %v", got)
	}
}

// A consumer whose stream is missing is an error that says what to do.
func TestConsumerWithoutStreamSaysWhatToDo(t *testing.T) {
	s := brokertest.Start(t)
	_, js := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := provision.AdvisoriesConsumer(ctx, js, "r")
	if err == nil || !strings.Contains(err.Error(), "run `aerie produce`") {
		t.Fatalf("err = %v, want advice to run aerie produce", err)
	}
}

// Streams made by an older aerie, without atomic publish, are changed to
// take atomic batches by the next provisioning, which keeps the rest of
// their configuration; the server takes the change.
func TestProvisionAllowsAtomicPublishOnOlderStreams(t *testing.T) {
	s := brokertest.Start(t)
	_, js := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: schema.ResultsStream, Subjects: []string{schema.ResultsRoot + ".>"},
		Description: "edited by an operator", Storage: jetstream.FileStorage,
		MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
	}); err != nil {
		t.Fatal(err)
	}
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{schema.PromptsStream, schema.ResultsStream, schema.DeadStream, schema.TurnsStream} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !st.CachedInfo().Config.AllowAtomicPublish {
			t.Errorf("stream %s does not allow atomic publish", name)
		}
	}
	st, err := js.Stream(ctx, schema.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	if d := st.CachedInfo().Config.Description; d != "edited by an operator" {
		t.Fatalf("the existing stream's configuration was replaced: description %q", d)
	}
}

// Replicated streams on a lone server fail at once, saying to drop
// --replicas.
func TestReplicasOnALoneServerSayWhatToDo(t *testing.T) {
	s := brokertest.Start(t)
	_, js := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := provision.Streams(ctx, js, provision.Options{Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), "drop --replicas") || !strings.Contains(err.Error(), "runs alone") {
		t.Fatalf("err = %v, want advice to drop --replicas", err)
	}
}

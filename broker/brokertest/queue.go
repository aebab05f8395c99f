package brokertest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// Prompts returns n one-message prompts with ids "p0000", "p0001", ...
func Prompts(n int) []schema.Prompt {
	ps := make([]schema.Prompt, n)
	for i := range ps {
		id := fmt.Sprintf("p%04d", i)
		ps[i] = schema.Prompt{ID: id, Messages: []schema.Message{{Role: "user", Content: "question " + id}}}
	}
	return ps
}

// Queue writes the manifest of run (Total = len(prompts) unless set) and
// publishes the prompts the way the producer does, without reading a
// file. It lets worker and aggregator tests start from a queued run.
func Queue(t testing.TB, js jetstream.JetStream, m schema.Manifest, prompts []schema.Prompt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if m.Model == "" {
		m.Model = "test-model"
	}
	if m.Total == 0 {
		m.Total = len(prompts)
	}
	kv, err := provision.RunsBucket(ctx, js, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := schema.EncodeManifest(&m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, m.Run, b); err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		p := prompts[i]
		p.Run = m.Run
		data, err := schema.EncodePrompt(&p)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(schema.PromptSubject(m.Run, p.Unit()))
		msg.Data = data
		msg.Header.Set(schema.HeaderMsgID, schema.MsgID(m.Run, p.Unit()))
		msg.Header.Set(schema.HeaderPromptID, p.ID)
		if p.Sample != 0 {
			msg.Header.Set(schema.HeaderSample, strconv.Itoa(p.Sample))
		}
		msg.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindPrompt))
		schema.SetNeeds(msg.Header, schema.MessageNeeds(m.Needs, p.Uses()))
		if _, err := js.PublishMsg(ctx, msg); err != nil && !provision.IsAlreadyStored(err) {
			t.Fatal(err)
		}
	}
}

package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// maxDeliveries is the part of JetStream's max-deliveries advisory that
// aerie reads.
type maxDeliveries struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// writeAdvisories turns max-deliveries advisories into dead letters. A
// prompt reaches MaxDeliver without a dead letter when its last delivery
// ended without a word: the worker holding it was killed, or handed it
// back while stopping. JetStream then stops delivering it, and without
// this it would be in neither output file.
func (a *Aggregator) writeAdvisories(msgs []jetstream.Msg) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range msgs {
		if err := a.deadLetterLost(ctx, m); err != nil {
			return err
		}
	}
	ackAll(msgs, a)
	return nil
}

func (a *Aggregator) deadLetterLost(ctx context.Context, m jetstream.Msg) error {
	var adv maxDeliveries
	if err := json.Unmarshal(m.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		a.log.Warn("ignoring an advisory that is not a max-deliveries advisory", "subject", m.Subject(), "err", err)
		return nil
	}
	prompts, err := a.js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		return fmt.Errorf("max-deliveries advisory: %w", err)
	}
	raw, err := prompts.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // requeued since (replay, reconcile): a new message holds it
	}
	if err != nil {
		return fmt.Errorf("max-deliveries advisory: get prompt %d: %w", adv.StreamSeq, err)
	}
	token := schema.PromptToken(raw.Subject)
	d := &schema.DeadLetter{
		Run: a.cfg.Run, Reason: schema.ReasonExhausted, Attempts: int(adv.Deliveries),
		Error:    fmt.Sprintf("delivered %d times (the consumer's max_deliver) without a result or a dead letter: the workers that held it last were killed or stopped", adv.Deliveries),
		FailedAt: time.Now().UTC(), PromptSeq: adv.StreamSeq,
	}
	if p, err := schema.DecodePrompt(raw.Data); err == nil {
		d.ID, d.Sample, d.Messages, d.Params = p.ID, p.Sample, p.Messages, p.Params
		d.InputIDs, d.LossMask = p.InputIDs, p.LossMask
	} else {
		d.ID, d.Reason = raw.Header.Get(schema.HeaderPromptID), schema.ReasonPoison
		d.Sample = headerSample(raw.Header)
		d.Error = "undecodable prompt message: " + err.Error()
	}
	key := d.Unit().Key()
	a.mu.Lock()
	settled, err := a.completions.has(key)
	settled = settled || a.failed.final(key)
	a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("max-deliveries advisory: %w", err)
	}
	if settled {
		return nil
	}
	if stored, _, err := a.resultState(ctx, token); err != nil {
		return fmt.Errorf("max-deliveries advisory: %w", err)
	} else if stored {
		return nil // answered; the result is on its way to completions.jsonl
	}
	if err := a.publishDeadLetter(ctx, token, d); err != nil {
		return fmt.Errorf("max-deliveries advisory: %w", err)
	}
	a.log.Warn("prompt reached max deliveries without an answer: dead-lettered", "id", d.ID, "sample", d.Sample, "deliveries", adv.Deliveries)
	return nil
}

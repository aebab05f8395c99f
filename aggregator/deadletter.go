package aggregator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// publishDeadLetter stores d as the dead letter of the unit whose
// subject token is token, unless the unit has one already (that one
// stands). The dead-letter consumer then writes it to failed.jsonl like
// any other, and `aerie replay` finds it there.
func (a *Aggregator) publishDeadLetter(ctx context.Context, token string, d *schema.DeadLetter) error {
	data, err := schema.EncodeDeadLetter(d)
	if err != nil {
		return err
	}
	out := nats.NewMsg(schema.DeadRoot + "." + a.cfg.Run + "." + token)
	out.Data = data
	out.Header.Set(schema.HeaderMsgID, schema.DeadMsgID(a.cfg.Run, token, d.PromptSeq, uint64(d.Attempts)))
	if d.ID != "" {
		out.Header.Set(schema.HeaderPromptID, d.ID)
	}
	out.Header.Set(schema.HeaderRun, a.cfg.Run)
	out.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindDeadLetter))
	out.Header.Set(schema.HeaderContentType, schema.ContentTypeMsgpack)
	out.Header.Set(schema.HeaderReason, d.Reason)
	if d.Sample != 0 {
		out.Header.Set(schema.HeaderSample, strconv.Itoa(d.Sample))
	}
	if d.PromptSeq > 0 {
		out.Header.Set(schema.HeaderPromptSeq, strconv.FormatUint(d.PromptSeq, 10))
	}
	schema.SetNeeds(out.Header, schema.MessageNeeds(a.needs, d.Uses()))
	if _, err := a.js.PublishMsg(ctx, out, jetstream.WithExpectLastSequencePerSubject(0)); err != nil && !provision.IsAlreadyStored(err) {
		return fmt.Errorf("store dead letter of %s: %w", d.ID, err)
	}
	return nil
}

// deadLetterResult turns a result message that cannot be decoded into a
// poison dead letter carrying the prompt (read back from the prompts
// stream), so that replay can send the prompt again; replay removes the
// unreadable result first.
func (a *Aggregator) deadLetterResult(m jetstream.Msg, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token := schema.PromptToken(m.Subject())
	d := &schema.DeadLetter{
		Run: a.cfg.Run, ID: m.Headers().Get(schema.HeaderPromptID), Reason: schema.ReasonPoison,
		Error:  "the stored result cannot be read: " + cause.Error(),
		Worker: m.Headers().Get(schema.HeaderWorker), FailedAt: time.Now().UTC(),
		Sample: headerSample(m.Headers()),
	}
	if p, seq, err := a.storedPrompt(ctx, token); err == nil {
		d.Messages, d.Params, d.Sample, d.PromptSeq = p.Messages, p.Params, p.Sample, seq
		d.InputIDs, d.LossMask = p.InputIDs, p.LossMask
		if d.ID == "" {
			d.ID = p.ID
		}
	} else {
		a.log.Warn("undecodable result: its prompt cannot be read back either; the dead letter holds none", "subject", m.Subject(), "err", err)
	}
	if d.ID == "" {
		d.ID = "subject:" + m.Subject()
	}
	a.log.Error("undecodable result message: dead-lettered as poison", "subject", m.Subject(), "prompt_id", d.ID, "sample", d.Sample, "err", cause)
	return a.publishDeadLetter(ctx, token, d)
}

// headerSample is the sample a message's HeaderSample names; 0 when it
// has none (sample 0 carries none) or it is not a number.
func headerSample(h nats.Header) int {
	n, err := strconv.Atoi(h.Get(schema.HeaderSample))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// storedPrompt reads the prompt whose subject token is token from the
// prompts stream, with its stream sequence.
func (a *Aggregator) storedPrompt(ctx context.Context, token string) (*schema.Prompt, uint64, error) {
	prompts, err := a.js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		return nil, 0, err
	}
	raw, err := prompts.GetLastMsgForSubject(ctx, schema.PromptsRoot+"."+a.cfg.Run+"."+token)
	if err != nil {
		return nil, 0, err
	}
	if err := schema.CheckSchemaHeader(schema.KindPrompt, raw.Header.Get(schema.HeaderSchema)); err != nil {
		return nil, raw.Sequence, err
	}
	p, err := schema.DecodePrompt(raw.Data)
	if err != nil {
		return nil, raw.Sequence, err
	}
	return p, raw.Sequence, nil
}

// resultState says whether the results stream holds an answer for the
// unit whose subject token is token, and whether it can be read.
func (a *Aggregator) resultState(ctx context.Context, token string) (stored, readable bool, err error) {
	results, err := a.js.Stream(ctx, schema.ResultsStream)
	if err != nil {
		return false, false, err
	}
	raw, err := results.GetLastMsgForSubject(ctx, schema.ResultsRoot+"."+a.cfg.Run+"."+token)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	if schema.CheckSchemaHeader(schema.KindResult, raw.Header.Get(schema.HeaderSchema)) != nil {
		return true, false, nil
	}
	_, err = schema.DecodeResult(raw.Data)
	return true, err == nil, nil
}

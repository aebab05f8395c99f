package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// publishBudget bounds how long a worker keeps trying to store one result
// or dead letter, even while stopping: an answer that took minutes of GPU
// time is worth a few more seconds.
const publishBudget = time.Minute

func (w *Worker) publishResult(ctx context.Context, attempt int, p *schema.Prompt, c *answer) error {
	params := w.manifest.Params
	params.MaxTokens = c.maxTokens
	r := &schema.Result{
		Run: w.cfg.Run, ID: p.ID, Messages: p.Messages,
		Model: w.manifest.Model, Params: params,
		Reasoning: c.Reasoning, Content: c.Content, FinishReason: c.FinishReason,
		Truncated:    c.FinishReason == "length",
		PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens,
		Worker: w.cfg.Name, Attempts: attempt,
		TTFTMillis: c.TTFT.Milliseconds(), LatencyMs: c.Latency.Milliseconds(),
		FinishedAt: time.Now().UTC(),
		Simulated:  c.SystemFingerprint == schema.SimulatedFingerprint,
	}
	if c.Model != "" {
		r.Model = c.Model
	}
	data, err := schema.EncodeResult(r)
	if err != nil {
		return err
	}
	out := w.message(schema.ResultSubject(w.cfg.Run, schema.Unit{ID: p.ID}), schema.KindResult, p.ID, data)
	return w.store(ctx, out)
}

func (w *Worker) publishDeadLetter(ctx context.Context, d *delivery, p *schema.Prompt, reason string, cause error) error {
	dl := &schema.DeadLetter{
		Run: w.cfg.Run, Reason: reason, Attempts: d.attempt, Worker: w.cfg.Name,
		Error: cause.Error(), FailedAt: time.Now().UTC(), PromptSeq: d.seq,
	}
	var apiErr *openai.APIError
	if errors.As(cause, &apiErr) {
		dl.Status = apiErr.Status
		dl.Body = bounded(apiErr.Body, schema.MaxErrorBody)
	}
	token := schema.PromptToken(d.msg.Subject())
	if p != nil {
		dl.ID, dl.Messages = p.ID, p.Messages
	} else {
		// An undecodable prompt: keep what identifies it, and the subject
		// token, which is all that is certain.
		dl.ID = d.msg.Headers().Get(schema.HeaderPromptID)
		dl.Body = bounded(string(d.msg.Data()), schema.MaxErrorBody)
	}
	data, err := schema.EncodeDeadLetter(dl)
	if err != nil {
		return err
	}
	out := w.message(schema.DeadRoot+"."+w.cfg.Run+"."+token, schema.KindDeadLetter, dl.ID, data)
	out.Header.Set(schema.HeaderReason, reason)
	out.Header.Set(schema.HeaderPromptSeq, strconv.FormatUint(d.seq, 10))
	out.Header.Set(schema.HeaderMsgID, schema.DeadMsgID(w.cfg.Run, token, d.seq, uint64(d.attempt)))
	if err := w.store(ctx, out); err != nil {
		return err
	}
	return w.checkDeadLetterIsOurs(ctx, out.Subject, d)
}

// errSuperseded says the dead-letter subject holds a failure of an
// earlier copy of the prompt: a replay has queued it again and has not
// yet removed that dead letter. Terminating now would leave this failure
// unrecorded, so the prompt is handed back to fail (or succeed) again a
// little later.
var errSuperseded = errors.New("a dead letter of an earlier copy of this prompt is still stored (a replay is under way)")

// checkDeadLetterIsOurs makes sure the stored dead letter was written for
// this prompt message (by this delivery or an earlier one whose Term was
// lost), not for an earlier copy; on the prompt's last delivery whatever
// is stored is accepted, since it will not come back.
func (w *Worker) checkDeadLetterIsOurs(ctx context.Context, subject string, d *delivery) error {
	if w.maxDeliver > 0 && d.attempt >= w.maxDeliver {
		return nil
	}
	stored, err := lastStored(ctx, w.dead, subject)
	if err != nil {
		return fmt.Errorf("check dead letter %s: %w", subject, err)
	}
	if stored == nil {
		return fmt.Errorf("check dead letter %s: not found right after it was stored (was it purged?)", subject)
	}
	if seq, ok := schema.DeadLetterPromptSeq(stored.Header); ok && seq == d.seq {
		return nil
	}
	return errSuperseded
}

func (w *Worker) message(subject, kind, id string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(schema.HeaderMsgID, schema.MsgID(w.cfg.Run, schema.Unit{ID: id}))
	if id != "" {
		m.Header.Set(schema.HeaderPromptID, id)
	}
	m.Header.Set(schema.HeaderRun, w.cfg.Run)
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(kind))
	m.Header.Set(schema.HeaderContentType, schema.ContentTypeMsgpack)
	m.Header.Set(schema.HeaderWorker, w.cfg.Name)
	return m
}

// store publishes m to a once-per-subject stream and waits for the
// server's acknowledgement, retrying transient failures with the same
// message id. A subject that already holds a message counts as stored: a
// prompt delivered twice has its first answer kept.
func (w *Worker) store(ctx context.Context, m *nats.Msg) error {
	deadline := time.Now().Add(publishBudget)
	for i := 1; ; i++ {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err := w.js.PublishMsg(pctx, m, jetstream.WithExpectLastSequencePerSubject(0))
		cancel()
		if err == nil || provision.IsAlreadyStored(err) {
			return nil
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return fmt.Errorf("publish %s: %d bytes is over the server's max_payload (%d bytes): raise max_payload in the NATS server configuration: %w",
				m.Subject, len(m.Data), w.nc.MaxPayload(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("publish %s: gave up after %d attempts: %w", m.Subject, i, err)
		}
		w.log.Warn("publish failed; retrying", "subject", m.Subject, "attempt", i, "err", err)
		time.Sleep(retryDelay(i, 200*time.Millisecond, 5*time.Second))
	}
}

func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

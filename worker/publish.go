package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/batchstore"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// publishBudget bounds how long a worker keeps trying to store one result
// or dead letter, even while stopping: an answer that took minutes of GPU
// time is worth a few more seconds.
const publishBudget = time.Minute

// publishResult stores the result of j, built from its turns: with
// --turns all, the last turn's context with every earlier answer in it,
// the last turn's answer, and usage summed over the turns.
// It reports whether the result stored is this one (ours), not an
// earlier copy's: a hedge's (hedge.go) or another delivery's.
func (w *Worker) publishResult(ctx context.Context, attempt int, j *job) (ours bool, err error) {
	r := w.result(attempt, j)
	data, err := schema.EncodeResult(r)
	if err != nil {
		return false, err
	}
	subject := schema.ResultSubject(j.lane.run, j.p.Unit())
	out := w.message(j.lane.run, subject, schema.KindResult, j.p.Unit(), data)
	if ours, err = w.storeOnce(ctx, out); err != nil || ours {
		return ours, err
	}
	// Not known to be ours: its acknowledgement may have been lost.
	ours, err = w.storedByUs(ctx, subject)
	if err != nil {
		// Stored, by whichever copy: what matters is that it is.
		j.lane.log.Debug("cannot read back which copy of a result was stored", "id", j.p.ID, "err", err)
		return true, nil
	}
	return ours, nil
}

// result is the result of j, whose turns are finished.
func (w *Worker) result(attempt int, j *job) *schema.Result {
	last := j.turns[len(j.turns)-1]
	params := j.params
	params.MaxTokens = last.MaxTokens
	r := &schema.Result{
		Run: j.lane.run, ID: j.p.ID, Sample: j.p.Sample, Messages: j.p.Messages,
		Model: j.lane.manifest.Model, Params: params,
		Reasoning: last.Answer.Reasoning, Content: last.Answer.Content, FinishReason: last.Answer.FinishReason,
		Truncated: last.Answer.FinishReason == "length",
		Worker:    w.cfg.Name, Attempts: attempt,
		TTFTMillis: last.TTFTMillis, LatencyMs: last.LatencyMs,
		FinishedAt:     time.Now().UTC(),
		Turns:          len(j.turns),
		PromptTokenIDs: last.Answer.PromptTokenIDs, TokenIDs: last.Answer.TokenIDs,
		LengthHint: j.p.LengthHint,
	}
	if j.all {
		r.Messages = turnContext(j.p.Messages, j.turns, len(j.turns)-1)
		if planned := schema.TurnSlots(j.p.Messages); planned > len(j.turns) {
			r.TurnsPlanned = planned
		}
	}
	for _, t := range j.turns {
		if u := t.Answer.Usage; u != nil {
			r.PromptTokens += u.PromptTokens
			r.CompletionTokens += u.CompletionTokens
		}
		r.Simulated = r.Simulated || t.Simulated
	}
	if j.model != "" {
		r.Model = j.model
	}
	return r
}

func (w *Worker) publishDeadLetter(ctx context.Context, d *delivery, j *job, reason string, cause error) error {
	dl := &schema.DeadLetter{
		Run: d.lane.run, Reason: reason, Attempts: d.attempt, Worker: w.cfg.Name,
		Error: cause.Error(), FailedAt: time.Now().UTC(), PromptSeq: d.seq,
	}
	var apiErr *openai.APIError
	if errors.As(cause, &apiErr) {
		dl.Status = apiErr.Status
		dl.Body = bounded(apiErr.Body, schema.MaxErrorBody)
	}
	token := schema.PromptToken(d.msg.Subject())
	if j != nil {
		// The unit's own: a message of several samples has the first's.
		token = j.p.Unit().Token()
		dl.ID, dl.Messages, dl.Sample, dl.Params, dl.Turn = j.p.ID, j.p.Messages, j.p.Sample, j.p.Params, j.failed
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
	out := w.message(d.lane.run, schema.DeadRoot+"."+d.lane.run+"."+token, schema.KindDeadLetter, dl.Unit(), data)
	out.Header.Set(schema.HeaderReason, reason)
	out.Header.Set(schema.HeaderPromptSeq, strconv.FormatUint(d.seq, 10))
	out.Header.Set(schema.HeaderMsgID, schema.DeadMsgID(d.lane.run, token, d.seq, uint64(d.attempt)))
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
	if d.lane.lastDelivery(d.attempt) {
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

// message is a message about unit u of run with aerie's headers.
func (w *Worker) message(run, subject, kind string, u schema.Unit, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(schema.HeaderMsgID, schema.MsgID(run, u))
	if u.ID != "" {
		m.Header.Set(schema.HeaderPromptID, u.ID)
	}
	if u.Sample > 0 {
		m.Header.Set(schema.HeaderSample, strconv.Itoa(u.Sample))
	}
	m.Header.Set(schema.HeaderRun, run)
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
	_, err := w.storeOnce(ctx, m)
	return err
}

// storeOnce is store, and says whether m is what the subject holds now
// (ours) or the subject held a message already. A publish of m that was
// stored but whose acknowledgement was lost counts as not ours: m's
// subject then holds m or an earlier message, to be read to know which.
//
// Results and turns go first to the stream's group commit, to be stored
// in one atomic batch with others; a message the batch did not store
// (alone, refused whole because another message of it was already
// stored, or of unknown fate) is then published on its own, which tells
// whether its subject already held a message.
func (w *Worker) storeOnce(ctx context.Context, m *nats.Msg) (ours bool, err error) {
	deadline := time.Now().Add(publishBudget)
	if b := w.batchFor(m.Subject); b != nil {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		o, _ := b.Submit(m).Wait(wctx)
		cancel()
		if o == batchstore.Stored {
			return true, nil
		}
	}
	return w.storeAlone(ctx, m, deadline)
}

// storeAlone is storeOnce for one message on its own, retried until
// deadline.
func (w *Worker) storeAlone(ctx context.Context, m *nats.Msg, deadline time.Time) (ours bool, err error) {
	for i := 1; ; i++ {
		pctx, cancel := w.replies.Wait(context.WithoutCancel(ctx), 10*time.Second)
		ack, err := w.js.PublishMsg(pctx, m, jetstream.WithExpectLastSequencePerSubject(0))
		cancel()
		if err == nil {
			w.room.roomAgain(w.log)
			return !ack.Duplicate, nil
		}
		if provision.IsAlreadyStored(err) {
			return false, nil
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return false, fmt.Errorf("publish %s: %d bytes is over the server's max_payload (%d bytes): raise max_payload in the NATS server configuration: %w",
				m.Subject, len(m.Data), w.nc.MaxPayload(), err)
		}
		if provision.IsNoRoom(err) {
			// No deadline: the answer is kept until there is room, or
			// until the worker stops (then the prompt goes back).
			w.room.fullNow(err, w.log)
			if ctx.Err() != nil {
				return false, fmt.Errorf("publish %s: the JetStream store is full, and the worker stops: %w", m.Subject, err)
			}
		} else {
			if time.Now().After(deadline) {
				return false, fmt.Errorf("publish %s: gave up after %d attempts: %w", m.Subject, i, err)
			}
			w.log.Warn("publish failed; retrying", "subject", m.Subject, "attempt", i, "err", err)
		}
		t := time.NewTimer(retryDelay(i, 200*time.Millisecond, 5*time.Second))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

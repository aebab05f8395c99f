package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// putDeadLetter stores why j, delivered as d, failed for good (j nil: an
// undecodable prompt), and makes sure the dead letter stored is this
// prompt message's (see deadLetterIsOurs).
func (s *store) putDeadLetter(ctx context.Context, d *delivery, j *job, reason string, cause error) error {
	dl := &schema.DeadLetter{
		Run: d.lane.run, Reason: reason, Attempts: d.attempt, Worker: s.name,
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
		dl.InputIDs, dl.LossMask = j.p.InputIDs, j.p.LossMask
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
	out := s.message(d.lane.run, schema.DeadRoot+"."+d.lane.run+"."+token, schema.KindDeadLetter, dl.Unit(), data,
		schema.MessageNeeds(d.lane.manifest.Needs, dl.Uses()))
	out.Header.Set(schema.HeaderReason, reason)
	out.Header.Set(schema.HeaderPromptSeq, strconv.FormatUint(d.seq, 10))
	out.Header.Set(schema.HeaderMsgID, schema.DeadMsgID(d.lane.run, token, d.seq, uint64(d.attempt)))
	if err := s.put(ctx, out); err != nil {
		return err
	}
	return s.deadLetterIsOurs(ctx, out.Subject, d)
}

// errSuperseded says the dead-letter subject holds a failure of an
// earlier copy of the prompt: a replay has queued it again and has not
// yet removed that dead letter. Terminating now would leave this failure
// unrecorded, so the prompt is handed back to fail (or succeed) again a
// little later.
var errSuperseded = errors.New("a dead letter of an earlier copy of this prompt is still stored (a replay is under way)")

// deadLetterIsOurs makes sure the stored dead letter was written for
// this prompt message (by this delivery or an earlier one whose Term was
// lost), not for an earlier copy; on the prompt's last delivery whatever
// is stored is accepted, since it will not come back.
func (s *store) deadLetterIsOurs(ctx context.Context, subject string, d *delivery) error {
	if d.lane.lastDelivery(d.attempt) {
		return nil
	}
	stored, err := lastStored(ctx, s.dead, subject)
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

// deadLetterOf is the reason of the dead letter stored for unit u of
// run, found when it was written for the prompt message at seq.
func (s *store) deadLetterOf(ctx context.Context, run string, u schema.Unit, seq uint64) (reason string, found bool, err error) {
	m, err := lastStored(ctx, s.dead, schema.DeadSubject(run, u))
	if err != nil || m == nil {
		return "", false, err
	}
	if stored, ok := schema.DeadLetterPromptSeq(m.Header); !ok || stored != seq {
		return "", false, nil
	}
	return m.Header.Get(schema.HeaderReason), true, nil
}

func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

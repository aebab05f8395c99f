package requeue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// storedDeadLetter is one dead letter as stored: its subject, and the
// letter, or why it could not be read.
type storedDeadLetter struct {
	subject string
	letter  *schema.DeadLetter
	err     error
}

// eachDeadLetter calls fn with every dead letter of the run, in stream
// order, read one at a time with direct gets: nothing is consumed or
// acknowledged, so reading leaves no trace on the server. It stops at the
// stream's last sequence as it was when it started: a dead letter stored
// meanwhile (a replayed prompt that failed again at once) waits for the
// next replay, so one replay never goes round in circles.
func (r *Requeuer) eachDeadLetter(ctx context.Context, fn func(storedDeadLetter) error) error {
	var state jetstream.StreamState
	err := request(ctx, r.opts, "read the state of stream "+schema.DeadStream, func(ctx context.Context) error {
		info, err := r.dead.Info(ctx)
		if err == nil {
			state = info.State
		}
		return err
	})
	if err != nil {
		return err
	}
	filter := schema.RunFilter(schema.DeadRoot, r.run)
	for seq := max(state.FirstSeq, 1); seq <= state.LastSeq; {
		if err := ctx.Err(); err != nil {
			return err
		}
		var m *jetstream.RawStreamMsg
		err := request(ctx, r.opts, fmt.Sprintf("read the dead letter after sequence %d of %s from stream %s", seq-1, filter, schema.DeadStream), func(ctx context.Context) error {
			var err error
			m, err = r.dead.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				m = nil
				return nil
			}
			return err
		})
		if err != nil {
			return err
		}
		if m == nil || m.Sequence > state.LastSeq {
			return nil
		}
		d := storedDeadLetter{subject: m.Subject}
		d.letter, d.err = decodeDeadLetter(m)
		if err := fn(d); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

func decodeDeadLetter(m *jetstream.RawStreamMsg) (*schema.DeadLetter, error) {
	if err := schema.CheckSchemaHeader(schema.KindDeadLetter, m.Header.Get(schema.HeaderSchema)); err != nil {
		return nil, err
	}
	d, err := schema.DecodeDeadLetter(m.Data)
	if err != nil {
		return nil, err
	}
	if d.ID == "" {
		d.ID = m.Header.Get(schema.HeaderPromptID)
	}
	if d.Reason == "" {
		d.Reason = m.Header.Get(schema.HeaderReason)
	}
	if d.Reason == "" {
		d.Reason = "unknown"
	}
	return d, nil
}

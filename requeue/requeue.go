package requeue

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

// Outcome is what a requeue did.
type Outcome int

const (
	// Published: the prompt was published again; the run's consumer will
	// deliver it.
	Published Outcome = iota + 1
	// AlreadyQueued: the prompt's subject already held a copy waiting for
	// a worker (put there by a requeue that stopped before removing the
	// dead letter, or by another process meanwhile), so nothing was
	// published.
	AlreadyQueued
)

func (o Outcome) String() string {
	switch o {
	case Published:
		return "published"
	case AlreadyQueued:
		return "already queued"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Requeue puts one unit of run (p's id and sample) back to work and
// removes its dead letter.
// It is a shorthand for New followed by Requeuer.Requeue; to requeue many
// prompts, make one Requeuer and call its Requeue for each.
func Requeue(ctx context.Context, js jetstream.JetStream, run string, p *schema.Prompt, opts Options) error {
	r, err := New(ctx, js, run, opts)
	if err != nil {
		return err
	}
	_, err = r.Requeue(ctx, p)
	return err
}

// Requeue puts p's unit (its id and sample) back to work on the run's
// consumer in the three steps described in the package documentation, on
// the unit's own subject: the other samples of the prompt are not
// touched. p needs the prompt's id and messages; its Sample and Params
// are queued as they are, so that the unit is generated as before; its
// Run, if set, must be the Requeuer's run. p is not modified. When p has
// no Source, or no Params, the stored copy's are kept. The unit's
// failure count is reset. With --turns all, the turns of the unit
// already stored (schema.TurnsStream) stay: the worker that gets the
// unit continues after them.
//
// Requeue does not ask whether the prompt is being worked on: a prompt
// delivered and not yet settled is replaced, and the worker holding it
// works in vain (whichever answer is stored first is kept; the other is
// refused by the results stream). Reconcile asks first (see Classify);
// Replay starts from dead letters, whose prompts the workers gave up.
//
// When the subject holds a copy published after the dead letter was
// stored (by a requeue that stopped between steps 2 and 3) and the
// consumer has not settled that copy, nothing is published, only the dead
// letter is removed, and the outcome is AlreadyQueued.
//
// Once the first step is taken the others are completed even if ctx ends,
// within the request timeouts, so that an interrupted replay rarely
// leaves a prompt half way; if it does, running it again finishes it.
func (r *Requeuer) Requeue(ctx context.Context, p *schema.Prompt) (Outcome, error) {
	if err := r.check(p); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	q := *p
	q.Run = r.run
	u := q.Unit()
	old, err := r.last(ctx, r.prompts, schema.PromptSubject(r.run, u))
	if err != nil {
		return 0, err
	}
	dead, err := r.last(ctx, r.dead, schema.DeadSubject(r.run, u))
	if err != nil {
		return 0, err
	}
	ctx = context.WithoutCancel(ctx)
	queued, err := r.queuedCopy(ctx, &q, old, dead)
	if err != nil {
		return 0, err
	}
	outcome := AlreadyQueued
	if !queued {
		if err := r.resetAttempts(ctx, u); err != nil {
			return 0, err
		}
		if old != nil {
			keepStored(&q, old)
			if err := r.purge(ctx, r.prompts, old); err != nil {
				return 0, err
			}
		}
		if outcome, err = r.publish(ctx, &q); err != nil {
			return 0, err
		}
	}
	if dead != nil {
		if err := r.purge(ctx, r.dead, dead); err != nil {
			return outcome, fmt.Errorf("%s is queued again, but its dead letter stays: %w; run the replay again to remove it", unitName(u), err)
		}
	}
	return outcome, nil
}

func (r *Requeuer) check(p *schema.Prompt) error {
	switch {
	case p == nil:
		return errors.New("requeue: no prompt given")
	case p.ID == "":
		return errors.New("requeue: the prompt has no id: its subject cannot be found")
	case p.Sample < 0:
		return fmt.Errorf("requeue: prompt %q has sample %d: samples count from 0", p.ID, p.Sample)
	case len(p.Messages) == 0 && len(p.InputIDs) == 0:
		return fmt.Errorf("requeue: prompt %q has no messages nor input ids: there is nothing to send; produce it again from its input line", p.ID)
	case p.Run != "" && p.Run != r.run:
		return fmt.Errorf("requeue: prompt %q belongs to run %s, not %s", p.ID, p.Run, r.run)
	}
	return nil
}

// queuedCopy reports whether old, the message on the prompt's subject, is
// a copy queued again after the dead letter was written and not yet
// settled by the consumer. The producer's original never is: it carries
// the producer's message id. A copy is recognised by a different message
// id and a store time after the dead letter's; both times come from the
// server (from two stream leaders in a cluster, whose clocks agree to far
// less than the time between a prompt's delivery and its failure).
func (r *Requeuer) queuedCopy(ctx context.Context, p *schema.Prompt, old, dead *jetstream.RawStreamMsg) (bool, error) {
	if old == nil || dead == nil {
		return false, nil
	}
	if old.Header.Get(schema.HeaderMsgID) == schema.MsgID(r.run, p.Unit()) || !old.Time.After(dead.Time) {
		return false, nil
	}
	workers, err := r.Workers(ctx)
	if err != nil {
		return false, err
	}
	// A copy the consumer has settled failed again before its dead letter
	// could be stored (the earlier one was still there): queue it anew.
	return Classify(old.Sequence, workers) != Settled, nil
}

// keepStored copies into p what the stored prompt of its unit has and p
// lacks: the input position, so that error reports still name the input
// line, and the prompt's own parameters (a dead letter written before
// they were kept in it has none).
func keepStored(p *schema.Prompt, old *jetstream.RawStreamMsg) {
	if (p.Source != "" && p.Params != nil) || schema.CheckSchemaHeader(schema.KindPrompt, old.Header.Get(schema.HeaderSchema)) != nil {
		return
	}
	stored, err := schema.DecodePrompt(old.Data)
	if err != nil || stored.Unit() != p.Unit() {
		return
	}
	if p.Source == "" {
		p.Source = stored.Source
	}
	if p.Params == nil {
		p.Params = stored.Params
	}
}

// purge removes m from its stream, and nothing stored on its subject
// after it.
func (r *Requeuer) purge(ctx context.Context, s jetstream.Stream, m *jetstream.RawStreamMsg) error {
	stream := s.CachedInfo().Config.Name
	return request(ctx, r.opts, fmt.Sprintf("purge %s (sequence %d) from stream %s", m.Subject, m.Sequence, stream), func(ctx context.Context) error {
		return s.Purge(ctx, jetstream.WithPurgeSubject(m.Subject), jetstream.WithPurgeSequence(m.Sequence+1))
	})
}

// publish queues p, expecting its subject to be empty, with the headers
// the producer sets and a message id of its own.
func (r *Requeuer) publish(ctx context.Context, p *schema.Prompt) (Outcome, error) {
	data, err := schema.EncodePrompt(p)
	if err != nil {
		return 0, fmt.Errorf("requeue prompt %q: %w", p.ID, err)
	}
	m := nats.NewMsg(schema.PromptSubject(r.run, p.Unit()))
	m.Data = data
	m.Header.Set(schema.HeaderMsgID, requeueMsgID(r.run, p.Unit(), time.Now()))
	m.Header.Set(schema.HeaderPromptID, p.ID)
	if p.Sample != 0 {
		m.Header.Set(schema.HeaderSample, strconv.Itoa(p.Sample))
	}
	m.Header.Set(schema.HeaderRun, r.run)
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindPrompt))
	m.Header.Set(schema.HeaderContentType, schema.ContentTypeMsgpack)
	schema.SetNeeds(m.Header, schema.MessageNeeds(r.manifest.Needs, p.Uses()))
	outcome := Published
	err = request(ctx, r.opts, fmt.Sprintf("publish prompt %q to %s", p.ID, m.Subject), func(ctx context.Context) error {
		_, err := r.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(0))
		if provision.IsAlreadyStored(err) {
			outcome = AlreadyQueued
			return nil
		}
		return err
	})
	if errors.Is(err, nats.ErrMaxPayload) {
		return 0, fmt.Errorf("%w: the prompt is over the server's max_payload of %d bytes; raise max_payload in the nats-server configuration", err, r.js.Conn().MaxPayload())
	}
	if err != nil {
		return 0, err
	}
	return outcome, nil
}

// requeueMsgID is the Nats-Msg-Id of a unit queued again: the
// producer's id for the unit, then "/r" and the time in nanoseconds.
// It differs from every earlier copy's, so the de-duplication window
// (which remembers ids, not subjects) does not drop the new copy.
func requeueMsgID(run string, u schema.Unit, now time.Time) string {
	return schema.MsgID(run, u) + "/r" + strconv.FormatInt(now.UnixNano(), 10)
}

// resetAttempts forgets the failures counted against a unit, so that a
// replayed unit gets the run's whole max_attempts again rather than
// being dead-lettered at its first new failure.
func (r *Requeuer) resetAttempts(ctx context.Context, u schema.Unit) error {
	kv, err := r.js.KeyValue(ctx, schema.AttemptsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil // no failure was ever counted
	}
	if err != nil {
		return fmt.Errorf("requeue %s: open %s: %w", unitName(u), schema.AttemptsBucket, err)
	}
	if err := kv.Purge(ctx, schema.AttemptsKey(r.run, u)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("requeue %s: reset its failure count: %w", unitName(u), err)
	}
	return nil
}

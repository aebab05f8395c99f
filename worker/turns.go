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
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// converse generates every turn of a conversation (--turns all) in order.
// The context of a turn is the conversation up to its assistant
// placeholder, with every earlier placeholder replaced by the model's own
// answer; the input's assistant text is never sent. Each finished turn
// but the last is stored in the turns stream before the next starts, so
// that a delivery that dies costs only the turn it was generating: the
// next delivery continues after the last stored turn. l holds a slot on
// entry; it is given back while a finished turn is stored, and taken
// again, ahead of new prompts, for the next turn.
func (e *executor) converse(ctx context.Context, d *delivery, j *job, l *window.Lease) error {
	if err := e.store.loadTurns(ctx, j); err != nil {
		return err
	}
	if d.attempt > 1 {
		// Another delivery of this prompt, running beside this one, may
		// have stored its result after settledBefore looked and removed
		// the turns before loadTurns did: a result is stored before its
		// turns are removed, so looking again after loading them cannot
		// miss both. A failed look here is the store's trouble, as in
		// settledBefore.
		m, err := e.store.result(ctx, j.lane.run, j.p.Unit())
		switch {
		case err != nil && !j.lane.lastDelivery(d.attempt):
			return &policy.StoreError{Err: fmt.Errorf("look for the result of %s after loading its turns: %w", j.p.ID, err)}
		case err == nil && m != nil:
			return errAnswered
		}
	}
	for i := len(j.turns); i < j.k; i++ {
		if err := l.Acquire(ctx); err != nil {
			return err
		}
		t, err := e.generate(ctx, d, j, i, j.lane.requestMessages(turnContext(j.p.Messages, j.turns, i)))
		if err != nil {
			j.failed = i + 1
			return err
		}
		j.turns = append(j.turns, t)
		if i == j.k-1 || t.Answer.FinishReason == "length" {
			// The last turn, or one cut at max_tokens that the run keeps:
			// the conversation ends here and its result says so.
			return nil
		}
		l.Release()
		stored, err := e.store.putTurn(ctx, j, t)
		if err != nil {
			var large *policy.TooLargeError
			if errors.As(err, &large) {
				j.failed = i + 1
			}
			return err
		}
		j.turns[i] = stored
		j.stored++
		j.lane.n.interimTurns.Add(1)
		if e.answered(ctx, j) {
			return errAnswered
		}
		if d.attempt > 1 {
			// The next turn starts with the run's max_attempts: failures
			// of the turns before it are not its own.
			e.store.forgetFailures(ctx, j.lane.run, j.p.Unit(), j.lane.log)
		}
	}
	return nil
}

// errAnswered ends a delivery of a conversation whose result another
// delivery, running at the same time after a redelivery, has stored:
// nothing more this one generates would be kept.
var errAnswered = errors.New("another delivery stored the conversation's result")

// answered reports whether the result of j is stored. A delivery looks
// after each turn it stores: when another delivery of the conversation
// stored its result and removed its turns before this turn was stored,
// this delivery is the one left to remove it (see settleAnswered). A
// failed look-up counts as not answered: the conversation goes on.
func (e *executor) answered(ctx context.Context, j *job) bool {
	m, err := e.store.result(ctx, j.lane.run, j.p.Unit())
	return err == nil && m != nil
}

// requestMessages is a turn's context as sent: earlier answers with
// their content, and their reasoning when the run keeps it.
func (l *lane) requestMessages(msgs []schema.Message) []openai.Message {
	keep := l.manifest.ContextReasoning == schema.ContextReasoningKeep
	out := make([]openai.Message, len(msgs))
	for i, m := range msgs {
		out[i] = openai.Message{Role: m.Role, Content: m.Content}
		if keep && m.Role == "assistant" {
			out[i].ReasoningContent = m.Reasoning
		}
	}
	return out
}

// loadTurns puts the turns of j that earlier deliveries stored in
// j.turns, in order, up to the first missing one. A turn that was cut at
// max_tokens under another budget than the one in force now (a replay
// with a larger one) is not reused: it and the turns after it are
// removed, to be generated again.
func (s *store) loadTurns(ctx context.Context, j *job) error {
	u := j.p.Unit()
	for i := 0; i < j.k-1; i++ {
		m, err := lastStored(ctx, s.turns, schema.TurnSubject(j.lane.run, u, i))
		if err != nil {
			return &policy.StoreError{Err: fmt.Errorf("look up stored turn %d of %s: %w", i+1, j.p.ID, err)}
		}
		if m == nil {
			break
		}
		t, err := schema.DecodeTurn(m.Data)
		switch {
		case err != nil:
			j.lane.log.Warn("stored turn cannot be decoded; generating it again", "id", j.p.ID, "sample", j.p.Sample, "turn", i+1, "err", err)
		case t.Index != i:
			j.lane.log.Warn("stored turn has the wrong index; generating it again", "id", j.p.ID, "sample", j.p.Sample, "turn", i+1, "index", t.Index)
		case t.Answer.FinishReason == "length" && t.MaxTokens != j.params.MaxTokens:
			j.lane.log.Info("stored turn was cut at another max_tokens; generating it again", "id", j.p.ID, "sample", j.p.Sample,
				"turn", i+1, "stored_max_tokens", t.MaxTokens, "max_tokens", j.params.MaxTokens)
		default:
			j.turns = append(j.turns, t)
			j.stored++
			j.lane.n.interimTurns.Add(1)
			continue
		}
		return s.purgeTurnsFrom(ctx, j, i)
	}
	return nil
}

// purgeTurnsFrom removes the stored turns of j from turn i on.
func (s *store) purgeTurnsFrom(ctx context.Context, j *job, i int) error {
	for ; i < j.k-1; i++ {
		subject := schema.TurnSubject(j.lane.run, j.p.Unit(), i)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := s.turns.Purge(pctx, jetstream.WithPurgeSubject(subject))
		cancel()
		if err != nil {
			return &policy.StoreError{Err: fmt.Errorf("remove stored turn %d of %s to generate it again: %w", i+1, j.p.ID, err)}
		}
	}
	return nil
}

// putTurn stores a finished turn and returns the turn stored for its
// place: t, or the one another delivery of the same prompt stored first
// (the first answer wins, as with results), with which the conversation
// goes on.
func (s *store) putTurn(ctx context.Context, j *job, t *schema.Turn) (*schema.Turn, error) {
	data, err := schema.EncodeTurn(t)
	if err != nil {
		return nil, fmt.Errorf("encode turn %d of %s: %w", t.Index+1, j.p.ID, err)
	}
	subject := schema.TurnSubject(j.lane.run, j.p.Unit(), t.Index)
	m := s.message(j.lane.run, subject, schema.KindTurn, j.p.Unit(), data, j.lane.manifest.Needs)
	// Every turn of a unit would share the unit's message id, and the
	// de-duplication window would swallow all but the first: the
	// expected-empty subject alone makes the publish happen once.
	m.Header.Del(schema.HeaderMsgID)
	m.Header.Set(schema.HeaderTurn, strconv.Itoa(t.Index))
	ours, err := s.putOnce(ctx, m)
	if errors.Is(err, nats.ErrMaxPayload) {
		// Asking again gives a turn as large: record why instead.
		return nil, &policy.TooLargeError{Err: fmt.Errorf("store turn %d of %s: %w", t.Index+1, j.p.ID, err)}
	}
	if err != nil {
		return nil, &policy.StoreError{Err: fmt.Errorf("store turn %d of %s: %w", t.Index+1, j.p.ID, err)}
	}
	if ours {
		return t, nil
	}
	stored, err := lastStored(ctx, s.turns, subject)
	if err == nil && stored == nil {
		err = errors.New("not found right after the store said it held one (was it purged?)")
	}
	if err != nil {
		return nil, &policy.StoreError{Err: fmt.Errorf("read turn %d of %s stored by another delivery: %w", t.Index+1, j.p.ID, err)}
	}
	first, err := schema.DecodeTurn(stored.Data)
	if err != nil {
		return nil, &policy.StoreError{Err: fmt.Errorf("read turn %d of %s stored by another delivery: %w", t.Index+1, j.p.ID, err)}
	}
	j.lane.log.Info("another delivery stored this turn first; going on with its answer", "id", j.p.ID, "sample", j.p.Sample, "turn", t.Index+1, "by", first.Worker)
	return first, nil
}

// purgeTurns removes every stored turn of u, of l's run, once its result
// is stored, best effort: `aerie runs rm` removes any left over.
func (s *store) purgeTurns(ctx context.Context, l *lane, u schema.Unit) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.turns.Purge(pctx, jetstream.WithPurgeSubject(schema.TurnsFilter(l.run, u))); err != nil {
		l.log.Warn("cannot remove the stored turns of an answered conversation; `aerie runs rm` removes them", "id", u.ID, "sample", u.Sample, "err", err)
	}
}

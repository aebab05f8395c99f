package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/flights"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// executor answers the prompts delivered to a worker, one goroutine
// each: it decodes the prompt, settles a redelivery whose outcome is
// stored already, generates the answer (one request, a conversation's
// turns, or the samples of a message) through the requester, and hands
// the outcome to the settler. It never pulls nor decides what to pull.
// The zero value is not usable; New makes it.
type executor struct {
	// name is the worker's.
	name     string
	requests *requester
	flights  *flights.Registry
	store    *store
	settler  *settler
	log      *slog.Logger
	// samples is whether the backend answers several samples in one
	// request, found out once (samples.go).
	samples samplesSupport
	// replies is the worker's link, for the deliveries' acks.
	link *link
	// extraction is what hidden-states runs need.
	extraction *extractWork
}

// process handles one delivered prompt from decode to acknowledgement. l
// holds a window slot on entry, and gives it back once the last request
// is over, before the outcome is stored.
func (e *executor) process(ctx context.Context, ln *lane, msg jetstream.Msg, l *window.Lease) {
	generated := sync.OnceFunc(func() { ln.n.active.Add(-1) })
	defer generated()
	meta, err := msg.Metadata()
	if err != nil {
		// Not a JetStream message: nothing to acknowledge.
		ln.log.Error("message without JetStream metadata", "subject", msg.Subject(), "err", err)
		return
	}
	d := &delivery{msg: msg, attempt: int(meta.NumDelivered), seq: meta.Sequence.Stream, progress: startProgress(ln, msg), lane: ln, replies: e.link.replies}
	if d.attempt > 1 {
		ln.cameBack.Add(1)
	}
	defer d.progress.stop()
	defer ln.hedgedBy.Delete(d.seq)
	err = ln.needs.Check(ln.run, msg.Headers())
	if le := (*schema.LackError)(nil); errors.As(err, &le) {
		ln.lack(le)
	} else if le := ln.lacks.Load(); le != nil {
		// The worker has left the run: what it pulled with the message
		// that needs the feature goes back too.
		err = le
	}
	if err != nil {
		// Before it is decoded: a build without the feature cannot tell
		// what the message asks.
		l.Release()
		generated()
		e.settler.settle(ctx, d, nil, err)
		return
	}
	p, err := decodePrompt(msg)
	if err != nil {
		e.settler.settle(ctx, d, nil, &policy.PoisonError{Err: err})
		return
	}
	if ln.manifest.Task == schema.TaskHiddenStates {
		e.extract(ctx, d, p, l, generated)
		return
	}
	if p.SampleCount() > 1 && ln.manifest.TurnsMode() != schema.TurnsAll {
		e.processSamples(ctx, d, p, l, generated)
		return
	}
	j := newJob(ln, p)
	defer func() { ln.n.interimTurns.Add(-int64(j.stored)) }()
	if d.attempt > 1 {
		settled, err := e.settler.settledBefore(ctx, d, j)
		if err != nil {
			l.Release()
			generated()
			e.settler.settle(ctx, d, j, err)
			return
		}
		if settled {
			return
		}
	}
	if policy.SlowFor(p.LengthHint, d.attempt, ln.maxDeliver, ln.limit()) {
		l.Release()
		generated()
		e.settler.settle(ctx, d, j, policy.ErrSlowForHint)
		return
	}
	if j.all {
		err = e.converse(ctx, d, j, l)
	} else {
		var t *schema.Turn
		if t, err = e.generate(ctx, d, j, 0, j.messages()); err == nil {
			j.turns = append(j.turns, t)
		}
	}
	// No request of this prompt will generate again: its slot goes to the
	// next prompt while this one is stored and acknowledged, which under
	// load takes as long as a short answer.
	l.Release()
	generated()
	if errors.Is(err, errAnswered) {
		e.settler.settleAnswered(ctx, d, j)
		return
	}
	e.settler.settle(ctx, d, j, err)
}

// generate asks the backend for turn i of j, sent msgs, and returns it as
// a finished turn. Its request is keyed by the prompt's sequence; a last
// delivery is never handed back at the end of the run: it would not come
// again.
func (e *executor) generate(ctx context.Context, d *delivery, j *job, i int, msgs []openai.Message) (*schema.Turn, error) {
	return e.ask(ctx, j, i, msgs, &flights.Flight{Key: policy.FlightKey{Seq: d.seq}, Lane: d.lane.index, Unit: j.p.Unit(),
		Hint: j.p.LengthHint, Attempt: d.attempt, Last: d.lane.lastDelivery(d.attempt)})
}

// ask asks the backend for turn i of j, sent msgs, through f, which is in
// the flights registry meanwhile, and returns it as a finished turn.
func (e *executor) ask(ctx context.Context, j *job, i int, msgs []openai.Message, f *flights.Flight) (*schema.Turn, error) {
	defer e.flights.Add(f)()
	a, err := e.answer(ctx, j, e.requests.request(j.lane, msgs, j.params), f)
	if err != nil {
		return nil, err
	}
	return j.turn(i, a, e.name), nil
}

// answer asks the backend for an answer to req through f and applies the
// run's on-length policy (policy.OnLength): keep a truncated answer
// (flagged), turn it into an error, or ask again with a larger
// max_tokens.
func (e *executor) answer(ctx context.Context, j *job, req openai.ChatRequest, f *flights.Flight) (*answer, error) {
	for {
		comp, err := e.requests.send(ctx, j.lane, f, req)
		if err != nil {
			return nil, err
		}
		j.lane.answers.add(comp.Usage.CompletionTokens)
		if !j.all {
			j.lane.addHinted(j.p.LengthHint, comp.Usage.CompletionTokens)
		}
		a := &answer{Completion: comp, maxTokens: req.MaxTokens}
		if comp.FinishReason != "length" {
			return a, nil
		}
		next, err := policy.OnLength(j.lane.manifest.Policy, req.MaxTokens, j.lengthBase, comp.Usage.CompletionTokens)
		switch {
		case err != nil:
			return nil, err
		case next == 0:
			return a, nil
		}
		j.lane.log.Info("answer truncated; asking again with a larger max_tokens", "id", j.p.ID, "sample", j.p.Sample, "max_tokens", next)
		req.MaxTokens = next
	}
}

func decodePrompt(msg jetstream.Msg) (*schema.Prompt, error) {
	if err := schema.CheckSchemaHeader(schema.KindPrompt, msg.Headers().Get(schema.HeaderSchema)); err != nil {
		return nil, err
	}
	return schema.DecodePrompt(msg.Data())
}

package requeue

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// State is where a unit's prompt message stands with the run's workers.
type State int

const (
	// Missing: the prompts stream holds no message for the prompt. It was
	// never produced, was lost with the broker's store, or was purged by a
	// requeue that stopped before publishing it again.
	Missing State = iota + 1
	// Queued: stored and not delivered yet; a worker will get it.
	Queued
	// InFlight: delivered, and perhaps not settled: a worker may be
	// generating it, or it waits for a retry after a transient failure.
	InFlight
	// Settled: acknowledged or terminated; the consumer will not deliver
	// it again.
	Settled
)

func (s State) String() string {
	switch s {
	case Missing:
		return "missing"
	case Queued:
		return "queued"
	case InFlight:
		return "in flight"
	case Settled:
		return "settled"
	}
	return "unknown"
}

// Classify tells the state of the prompt message stored at stream
// sequence seq (0: none is stored) from the state of the run's workers
// consumer (nil: it does not exist yet).
//
// JetStream does not say cheaply whether one given message is pending, so
// the rule uses the consumer's position:
//
//   - no message: Missing;
//   - no consumer, or seq beyond the last sequence delivered: Queued;
//   - seq at or below the ack floor (every message up to it is
//     acknowledged or terminated): Settled;
//   - nothing pending at all: Settled;
//   - otherwise: InFlight.
//
// The rule never calls a message Settled while a worker may still hold
// it, because the ack floor only passes messages that are settled. It
// errs the other way: a message settled out of order, above an older one
// still pending, counts as InFlight until the floor passes it. One long
// answer holds the floor back for as long as it takes, so a prompt
// acknowledged meanwhile but whose output was lost is requeued only by a
// later reconcile. A prompt whose last allowed delivery ran out without an
// answer counts as InFlight until the server drops it from pending.
func Classify(seq uint64, workers *jetstream.ConsumerInfo) State {
	switch {
	case seq == 0:
		return Missing
	case workers == nil, seq > workers.Delivered.Stream:
		return Queued
	case seq <= workers.AckFloor.Stream, workers.NumAckPending == 0:
		return Settled
	}
	return InFlight
}

// PromptState classifies the prompt message of unit u with Classify.
// workers must have been read (with Workers) before this call, so that a
// message delivered and settled after the read is seen as InFlight or
// Queued, never the reverse.
func (r *Requeuer) PromptState(ctx context.Context, u schema.Unit, workers *jetstream.ConsumerInfo) (State, error) {
	s, _, err := r.promptState(ctx, u, workers)
	return s, err
}

// promptState is PromptState that also returns the stored message, nil
// when Missing.
func (r *Requeuer) promptState(ctx context.Context, u schema.Unit, workers *jetstream.ConsumerInfo) (State, *jetstream.RawStreamMsg, error) {
	m, err := r.last(ctx, r.prompts, schema.PromptSubject(r.run, u))
	if err != nil {
		return Missing, nil, err
	}
	if m == nil && u.Sample > 0 {
		// A prompt's samples queued in one message (schema.Prompt.Samples)
		// are on the first sample's subject.
		first, err := r.last(ctx, r.prompts, schema.PromptSubject(r.run, schema.Unit{ID: u.ID}))
		if err != nil {
			return Missing, nil, err
		}
		if first != nil && coversSample(first, u.Sample) {
			return Classify(first.Sequence, workers), first, nil
		}
	}
	if m == nil {
		return Missing, nil, nil
	}
	return Classify(m.Sequence, workers), m, nil
}

// coversSample reports whether m is a prompt message whose samples
// include sample k.
func coversSample(m *jetstream.RawStreamMsg, k int) bool {
	if schema.CheckSchemaHeader(schema.KindPrompt, m.Header.Get(schema.HeaderSchema)) != nil {
		return false
	}
	p, err := schema.DecodePrompt(m.Data)
	return err == nil && k >= p.Sample && k < p.Sample+p.SampleCount()
}

package requeue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// Batching of the prompt look-ups of a reconcile. Units that are in no
// output file and have nothing stored are looked up on the prompts stream
// lookupBatch at a time, lookupConcurrency requests at once: on a cluster
// a round trip takes about a millisecond, and 25,000 of them one after the
// other would take most of a minute.
const (
	lookupBatch       = 256
	lookupConcurrency = 32
)

// reconciler walks the input of one Reconcile.
type reconciler struct {
	r   *Requeuer
	cfg ReconcileConfig
	rep *ReconcileReport
	// completed and failed hold the keys (schema.Unit.Key) of the units
	// with a line in the output files.
	completed, failed idSet
	workers           *jetstream.ConsumerInfo
	// answered and deadLettered hold the subject tokens of the units
	// with an answer or a dead letter stored.
	answered, deadLettered idSet
	seen                   map[string]int // subject token of each valid id -> its line
	source                 string
	batch                  []*schema.Prompt // units to look up, each as its input line gives it
	unit                   string           // "line" or "row", as the input's records are
}

func (rc *reconciler) run(ctx context.Context, rd *dataset.Reader) error {
	rc.unit = rd.Unit()
	for {
		if err := ctx.Err(); err != nil {
			return interrupted(err)
		}
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			rc.rep.Lines = rd.Count()
			return rc.flush(ctx)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rc.cfg.PromptsFile, err)
		}
		rc.rep.Lines = rd.Count()
		if rec.Err != nil {
			rc.invalid(rec.N, rec.Err.Error())
			continue
		}
		id, msgs, line := rec.Line.ID, rec.Line.Messages, rec.N
		token := schema.SubjectToken(id)
		if first, dup := rc.seen[token]; dup {
			rc.invalid(line, fmt.Sprintf("duplicate id %q (first on %s %d)", dataset.Truncate(id, 60), rc.unit, first))
			continue
		}
		rc.seen[token] = line
		rc.rep.Input++
		for sample := range rc.rep.Samples {
			u := schema.Unit{ID: id, Sample: sample}
			rc.rep.Units++
			switch {
			case rc.completed.has(u.Key()):
				rc.rep.Completed++
			case rc.failed.has(u.Key()):
				rc.rep.Failed++
			case rc.answered.has(u.Token()):
				rc.rep.AwaitingResult++
			case rc.deadLettered.has(u.Token()):
				rc.rep.AwaitingDeadLetter++
			default:
				rc.batch = append(rc.batch, &schema.Prompt{
					Run: rc.cfg.Run, ID: id, Sample: sample, Messages: msgs, Params: rec.Line.Params,
					InputIDs: rec.Line.InputIDs, LossMask: rec.Line.LossMask,
					Source: fmt.Sprintf("%s:%d", rc.source, line),
				})
				if len(rc.batch) >= lookupBatch {
					if err := rc.flush(ctx); err != nil {
						return err
					}
				}
			}
		}
	}
}

// flush looks up the state of the batched units, then settles each in
// input order.
func (rc *reconciler) flush(ctx context.Context) error {
	batch := rc.batch
	rc.batch = rc.batch[:0]
	states := make([]State, len(batch))
	stored := make([]*jetstream.RawStreamMsg, len(batch))
	errs := make([]error, len(batch))
	slots := make(chan struct{}, lookupConcurrency)
	var wg sync.WaitGroup
	for i, p := range batch {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			states[i], stored[i], errs[i] = rc.r.promptState(ctx, p.Unit(), rc.workers)
		})
	}
	wg.Wait()
	for i, p := range batch {
		err := errs[i]
		if err == nil {
			err = rc.settle(ctx, p, states[i], stored[i])
		}
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx.Err())
			}
			return fmt.Errorf("reconcile stopped at %s (%s): %w; what was requeued stays requeued: run reconcile again to continue", unitName(p.Unit()), p.Source, err)
		}
	}
	return nil
}

// settle decides about a unit in no output file and with nothing stored:
// the one place where such a unit is counted or requeued. p is the unit
// as its input line gives it; stored, its message on the prompts stream
// (nil when Missing).
func (rc *reconciler) settle(ctx context.Context, p *schema.Prompt, state State, stored *jetstream.RawStreamMsg) error {
	rep := rc.rep
	switch state {
	case Queued:
		rep.Queued++
		return nil
	case InFlight:
		rep.InFlight++
		return nil
	}
	if !rc.cfg.DryRun {
		q, err := rc.asQueued(ctx, p, stored)
		if err != nil {
			return err
		}
		outcome, err := rc.r.Requeue(ctx, q)
		if err != nil {
			return err
		}
		if outcome == AlreadyQueued { // queued by another process meanwhile
			rep.Queued++
			return nil
		}
	}
	if state == Missing {
		rep.RequeuedMissing++
	} else {
		rep.RequeuedSettled++
	}
	if len(rep.FirstRequeued) < MaxListed {
		rep.FirstRequeued = append(rep.FirstRequeued, p.Unit())
	}
	return nil
}

// asQueued returns the unit of p as it was queued, to queue it again the
// same: the prompt message stored for it (stored), or, when that is gone
// or unreadable, the one stored for another sample of the prompt, with
// p's sample. The producer may have queued more than the input line's id
// and messages (the line's own parameters, for one), which only the
// stored message keeps. With neither, it is p, rebuilt from its line.
func (rc *reconciler) asQueued(ctx context.Context, p *schema.Prompt, stored *jetstream.RawStreamMsg) (*schema.Prompt, error) {
	if q := decodeStored(stored, p.Unit()); q != nil {
		return keepInput(q, p), nil // as queued last, max_tokens of a replay included
	}
	for sample := range rc.rep.Samples {
		if sample == p.Sample {
			continue
		}
		u := schema.Unit{ID: p.ID, Sample: sample}
		m, err := rc.r.last(ctx, rc.r.prompts, schema.PromptSubject(rc.cfg.Run, u))
		if err != nil {
			return nil, err
		}
		if q := decodeStored(m, u); q != nil {
			q.Sample = p.Sample
			q.MaxTokens = 0 // a replay's budget for that sample, not this one's
			return keepInput(q, p), nil
		}
	}
	return p, nil
}

// decodeStored decodes m as the prompt of unit u; nil when m is nil or is
// not that.
func decodeStored(m *jetstream.RawStreamMsg, u schema.Unit) *schema.Prompt {
	if m == nil || schema.CheckSchemaHeader(schema.KindPrompt, m.Header.Get(schema.HeaderSchema)) != nil {
		return nil
	}
	q, err := schema.DecodePrompt(m.Data)
	if err != nil || q.Unit() != u || len(q.Messages) == 0 {
		return nil
	}
	return q
}

// keepInput gives a prompt read back from the stream the run of p, and
// its input position when it has none. It asks for p's sample alone: a
// unit is requeued on its own, even when its prompt's samples were queued
// in one message.
func keepInput(q, p *schema.Prompt) *schema.Prompt {
	q.Samples = 0
	q.Run = p.Run
	if q.Source == "" {
		q.Source = p.Source
	}
	return q
}

func (rc *reconciler) invalid(line int, reason string) {
	rc.rep.Invalid++
	if len(rc.rep.InvalidLines) < MaxListed {
		rc.rep.InvalidLines = append(rc.rep.InvalidLines, fmt.Sprintf("%s:%d: %s", rc.cfg.PromptsFile, line, reason))
	}
}

func interrupted(err error) error {
	return fmt.Errorf("reconcile interrupted (%w): what was requeued stays requeued; run reconcile again to continue", err)
}

package requeue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/producer"
	"github.com/aerie-dev/aerie/schema"
)

// Batching of the prompt look-ups of a reconcile. Prompts that are in no
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
	r                 *Requeuer
	cfg               ReconcileConfig
	rep               *ReconcileReport
	completed, failed idSet
	workers           *jetstream.ConsumerInfo
	// answered and deadLettered hold the subject tokens of the prompts
	// with an answer or a dead letter stored.
	answered, deadLettered idSet
	seen                   map[string]int // subject token of each valid id -> its line
	source                 string
	batch                  []*schema.Prompt // prompts to look up
}

func (rc *reconciler) run(ctx context.Context, lr *lineReader) error {
	for {
		if err := ctx.Err(); err != nil {
			return interrupted(err)
		}
		data, _, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			return rc.flush(ctx)
		}
		if err != nil {
			return fmt.Errorf("read %s after line %d: %w", rc.cfg.PromptsFile, lr.line, err)
		}
		rc.rep.Lines++
		if tooLong {
			rc.invalid(lr.line, fmt.Sprintf("line is longer than %d MiB", maxLineBytes>>20))
			continue
		}
		if len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		id, msgs, err := producer.ParseLine(data)
		if err != nil {
			rc.invalid(lr.line, err.Error())
			continue
		}
		token := schema.SubjectToken(id)
		if first, dup := rc.seen[token]; dup {
			rc.invalid(lr.line, fmt.Sprintf("duplicate id %q (first on line %d)", truncate(id, 60), first))
			continue
		}
		rc.seen[token] = lr.line
		rc.rep.Input++
		switch {
		case rc.completed.has(id):
			rc.rep.Completed++
		case rc.failed.has(id):
			rc.rep.Failed++
		case rc.answered.has(token):
			rc.rep.AwaitingResult++
		case rc.deadLettered.has(token):
			rc.rep.AwaitingDeadLetter++
		default:
			rc.batch = append(rc.batch, &schema.Prompt{
				Run: rc.cfg.Run, ID: id, Messages: msgs, Source: fmt.Sprintf("%s:%d", rc.source, lr.line),
			})
			if len(rc.batch) >= lookupBatch {
				if err := rc.flush(ctx); err != nil {
					return err
				}
			}
		}
	}
}

// flush looks up the state of the batched prompts, then settles each in
// input order.
func (rc *reconciler) flush(ctx context.Context) error {
	batch := rc.batch
	rc.batch = rc.batch[:0]
	states := make([]State, len(batch))
	errs := make([]error, len(batch))
	slots := make(chan struct{}, lookupConcurrency)
	var wg sync.WaitGroup
	for i, p := range batch {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			states[i], errs[i] = rc.r.PromptState(ctx, p.ID, rc.workers)
		})
	}
	wg.Wait()
	for i, p := range batch {
		err := errs[i]
		if err == nil {
			err = rc.settle(ctx, p, states[i])
		}
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx.Err())
			}
			return fmt.Errorf("reconcile stopped at prompt %q (%s): %w; what was requeued stays requeued: run reconcile again to continue", p.ID, p.Source, err)
		}
	}
	return nil
}

// settle decides about a prompt in no output file and with nothing
// stored: the one place where such a prompt is counted or requeued.
func (rc *reconciler) settle(ctx context.Context, p *schema.Prompt, state State) error {
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
		outcome, err := rc.r.Requeue(ctx, p)
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
		rep.FirstRequeued = append(rep.FirstRequeued, p.ID)
	}
	return nil
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

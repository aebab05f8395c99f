package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// The samples of a message are settled each on its own: an answer
// stored, a failure for good dead-lettered, with the settler's own
// pieces (putAnswer, bury, giveBack); the message is acknowledged once
// every sample's outcome is stored, and otherwise goes back as settle
// would send back a message of one.

// samplesLeft returns the jobs whose sample has no outcome stored by an
// earlier delivery: no result, and no dead letter written for this very
// message. A look-up that fails is a *policy.StoreError, as in
// settledBefore, except on the last delivery, where the sample is
// generated.
func (s *settler) samplesLeft(ctx context.Context, d *delivery, jobs []*job) ([]*job, error) {
	var left []*job
	for _, j := range jobs {
		u := j.p.Unit()
		res, err := s.store.result(ctx, d.lane.run, u)
		if err == nil && res != nil {
			continue
		}
		if err == nil {
			var found bool
			if _, found, err = s.store.deadLetterOf(ctx, d.lane.run, u, d.seq); err == nil && found {
				continue
			}
		}
		if err != nil {
			if d.lane.lastDelivery(d.attempt) {
				left = append(left, j)
				continue
			}
			return nil, &policy.StoreError{Err: fmt.Errorf("look for what an earlier delivery stored of %s sample %d: %w", u.ID, u.Sample, err)}
		}
		left = append(left, j)
	}
	return left, nil
}

// settleSamples ends a delivery of several samples, jobs being those this
// delivery was to answer, turns their answers and errs why the others
// have none (a single error, for every sample, when errs is shorter than
// jobs). Answers are stored and samples that failed for good
// dead-lettered at once; the rest, if any, decide how the message goes
// back, as settle decides for one: every sample then counts one failure,
// under the first's attempts, and its outcome is stored when the message
// is dead-lettered.
func (s *settler) settleSamples(ctx context.Context, d *delivery, jobs []*job, turns []*schema.Turn, errs []error) {
	log := withLazy(d.lane.log, "subject", d.msg.Subject(), "delivery", d.attempt, "id", jobs[0].p.ID, "samples", len(jobs))
	errOf := func(i int) error {
		if i < len(errs) {
			return errs[i]
		}
		return errs[0]
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		rest    []*job
		restErr error
		dead    int
	)
	keep := func(j *job, err error) {
		mu.Lock()
		defer mu.Unlock()
		rest = append(rest, j)
		if restErr == nil {
			restErr = err
		}
	}
	bury := func(j *job, reason string, cause error) {
		if err := s.bury(ctx, d, j, reason, cause); err != nil {
			keep(j, &policy.StoreError{Err: fmt.Errorf("dead-letter %s sample %d: %w", j.p.ID, j.p.Sample, err)})
			return
		}
		mu.Lock()
		dead++
		mu.Unlock()
	}
	for i, j := range jobs {
		var turn *schema.Turn
		if i < len(turns) {
			turn = turns[i]
		}
		err := errOf(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if turn == nil {
				if what, reason := policy.Settle(err, false, false); what == policy.DeadLetter {
					bury(j, reason, err)
					return
				}
				keep(j, err)
				return
			}
			j.turns = []*schema.Turn{turn}
			ours, perr := s.putAnswer(ctx, d, j)
			switch {
			case errors.Is(perr, nats.ErrMaxPayload):
				bury(j, schema.ReasonPermanent, &policy.TooLargeError{Err: perr})
			case perr != nil:
				keep(j, &policy.StoreError{Err: fmt.Errorf("store the answer of %s sample %d: %w", j.p.ID, j.p.Sample, perr)})
			case ours:
				d.lane.n.completed.Add(1)
				s.metrics.settled(d.lane.run, completedOutcome(j))
			default:
				d.lane.n.alreadySettled.Add(1)
				s.metrics.settled(d.lane.run, completedOutcome(j))
			}
		}()
	}
	wg.Wait()
	if len(rest) == 0 {
		if dead == len(jobs) {
			d.term(schema.ReasonPermanent, log)
			return
		}
		if err := d.ack(ctx); err != nil {
			log.Warn("ack failed after every sample's outcome was stored", "err", err)
		}
		return
	}
	s.settleRest(ctx, d, rest, restErr, log)
}

// settleRest hands back, or dead-letters, a message whose samples rest
// have no outcome yet, err being why.
func (s *settler) settleRest(ctx context.Context, d *delivery, rest []*job, err error, log *slog.Logger) {
	what, reason := policy.Settle(err, d.lane.lastDelivery(d.attempt), s.health.down())
	var delay time.Duration
	if what == policy.Retry {
		what, reason, delay = s.countAgainst(ctx, rest[0], d.attempt, err, log)
	}
	if what != policy.DeadLetter {
		s.giveBack(ctx, d, what, delay, err, log)
		return
	}
	log.Warn("dead-lettering the samples left", "reason", reason, "left", len(rest), "err", err)
	for _, j := range rest {
		if derr := s.bury(ctx, d, j, reason, err); derr != nil {
			log.Error("cannot store a dead letter; prompt will be retried", "sample", j.p.Sample, "err", derr)
			s.metrics.settled(d.lane.run, OutcomeTransient)
			d.nak(retryDelay(d.attempt, s.retry.base, s.retry.max), log)
			return
		}
	}
	d.term(reason, log)
}

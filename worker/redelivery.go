package worker

import (
	"context"
	"fmt"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// settledBefore looks, before a redelivered prompt is generated again,
// for the outcome an earlier delivery already stored, and settles the
// prompt with it: a stored result (its worker died, or lost its ack,
// after storing it) is acknowledged; a dead letter written for this very
// prompt message (its Term was lost) terminates it. Either way the
// answer or failure is already on its way to the output, and generating
// again would only burn GPU time. It reports whether the prompt was
// settled. A dead letter of an earlier copy of the prompt (a replay that
// has not yet removed it) does not settle this one.
//
// A failed look-up is a *policy.StoreError: the prompt goes back to be
// looked at again later, since generating it might burn a whole answer's
// GPU time only for the answer to be discarded, and a worker that cannot
// read the results stream is unlikely to be able to write to it. On the
// prompt's last delivery it is generated all the same: that is its only
// way to an answer.
//
// With --turns all, a conversation that has no stored outcome continues
// after its last stored turn (see converse).
func (s *settler) settledBefore(ctx context.Context, d *delivery, j *job) (bool, error) {
	p := j.p
	log := j.lane.log.With("id", p.ID, "delivery", d.attempt)
	if p.Sample > 0 {
		log = log.With("sample", p.Sample)
	}
	lookupFailed := func(what string, err error) (bool, error) {
		if j.lane.lastDelivery(d.attempt) {
			log.Warn("cannot look for an earlier "+what+" of a redelivered prompt on its last delivery; generating it", "err", err)
			return false, nil
		}
		return false, &policy.StoreError{Err: fmt.Errorf("look for an earlier %s of %s: %w", what, p.ID, err)}
	}
	res, err := s.store.result(ctx, j.lane.run, p.Unit())
	if err != nil {
		return lookupFailed("result", err)
	}
	if res != nil {
		if j.all && j.k > 1 {
			// Its worker may have died before removing them. Removed
			// before the ack: a worker that dies in between leaves the
			// prompt to be redelivered and removes them then.
			s.store.purgeTurns(ctx, j.lane, p.Unit())
		}
		if err := d.ack(ctx); err != nil {
			log.Warn("ack of an already answered prompt failed; it comes back and is acknowledged then", "err", err)
		}
		j.lane.n.alreadySettled.Add(1)
		log.Info("redelivered prompt already has a stored result: acknowledged without generating it")
		return true, nil
	}
	reason, found, err := s.store.deadLetterOf(ctx, j.lane.run, p.Unit(), d.seq)
	if err != nil {
		return lookupFailed("dead letter", err)
	}
	if !found {
		return false, nil
	}
	d.term(reason, log)
	j.lane.n.alreadySettled.Add(1)
	log.Info("redelivered prompt was dead-lettered on an earlier delivery: terminated without generating it")
	return true, nil
}

// settleAnswered ends a delivery of a conversation that another delivery
// answered while this one was generating it (both ran at once after a
// redelivery; see answered): the turns are removed again, as this
// delivery may have stored one after the other removed them, and the
// prompt is acknowledged, as a redelivery that finds the result is.
func (s *settler) settleAnswered(ctx context.Context, d *delivery, j *job) {
	log := j.lane.log.With("id", j.p.ID, "delivery", d.attempt, "turn", len(j.turns))
	if j.p.Sample > 0 {
		log = log.With("sample", j.p.Sample)
	}
	s.store.purgeTurns(ctx, j.lane, j.p.Unit())
	if err := d.ack(ctx); err != nil {
		log.Warn("ack of an already answered prompt failed; it comes back and is acknowledged then", "err", err)
	}
	j.lane.n.alreadySettled.Add(1)
	log.Info("conversation answered by another delivery meanwhile: acknowledged without generating its other turns")
}

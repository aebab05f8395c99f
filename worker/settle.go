package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// settler ends each delivery of a prompt with exactly one
// acknowledgement call, as policy.Settle chooses from how the attempt
// ended, after storing the answer or the dead letter it needs. It is
// shared by every delivery goroutine and holds nothing of its own. The
// zero value is not usable; New makes it.
type settler struct {
	// name is the worker's.
	name    string
	store   *store
	health  *breaker
	metrics *metrics
	hedges  *hedger
	// retry shapes the delays of prompts handed back.
	retry retrying
}

// retrying is how long a prompt handed back waits: a transient failure
// base x 2^(failures-1) up to max, one handed back during an outage
// outage.
type retrying struct {
	base, max, outage time.Duration
	// unfit is the delay of a prompt this worker lacks a feature for:
	// its pull wait, so that the pull open when it was handed back is
	// over before it comes again, and it goes to another worker.
	unfit time.Duration
}

// settle ends delivery d of j with exactly one acknowledgement call. j is
// nil for an undecodable prompt; with no error, j holds its answer.
func (s *settler) settle(ctx context.Context, d *delivery, j *job, err error) {
	what, reason := policy.Settle(err, d.lane.lastDelivery(d.attempt), s.health.down())
	attrs := []any{"subject", d.msg.Subject(), "delivery", d.attempt}
	if j != nil {
		attrs = append(attrs, "id", j.p.ID)
		if j.p.Sample > 0 {
			attrs = append(attrs, "sample", j.p.Sample)
		}
		if j.failed > 0 {
			attrs = append(attrs, "turn", j.failed)
		}
	}
	log := withLazy(d.lane.log, attrs...)
	var delay time.Duration
	if what == policy.Retry {
		what, reason, delay = s.countAgainst(ctx, j, d.attempt, err, log)
	}
	switch what {
	case policy.Done:
		s.done(ctx, d, j, log)
	case policy.HedgedAway:
		s.hedgedAway(ctx, d, j, log)
	case policy.DeadLetter:
		log.Warn("dead-lettering prompt", "reason", reason, "err", err)
		if derr := s.store.putDeadLetter(ctx, d, j, reason, err); derr != nil {
			if errors.Is(derr, errSuperseded) {
				log.Info("dead letter not stored yet: "+derr.Error(), "retry_in", s.retry.outage)
				s.metrics.settled(d.lane.run, OutcomeTransient)
				d.nak(s.retry.outage, log)
				return
			}
			log.Error("cannot store dead letter; prompt will be retried", "err", derr)
			s.metrics.settled(d.lane.run, OutcomeTransient)
			d.nak(retryDelay(d.attempt, s.retry.base, s.retry.max), log)
			return
		}
		d.term(reason, log)
		s.buried(d.lane, reason)
	default:
		s.giveBack(ctx, d, what, delay, err, log)
	}
}

// done stores j's answer and acknowledges the prompt.
func (s *settler) done(ctx context.Context, d *delivery, j *job, log *slog.Logger) {
	ours, perr := s.putAnswer(ctx, d, j)
	if perr != nil {
		if errors.Is(perr, nats.ErrMaxPayload) {
			// Asking again gives an answer as large: record why instead.
			if j.all {
				j.failed = len(j.turns)
			}
			s.settle(ctx, d, j, &policy.TooLargeError{Err: perr})
			return
		}
		s.later(ctx, d, log, "cannot store result; prompt will be retried", perr)
		return
	}
	// The stored turns are now part of a result: heartbeats no longer
	// count them as interim.
	j.lane.n.interimTurns.Add(-int64(j.stored))
	j.stored = 0
	if j.all && j.k > 1 {
		// Before the ack, so that a worker that dies in between leaves
		// the prompt to be redelivered, and the turns to be removed then
		// (see settledBefore).
		s.store.purgeTurns(ctx, j.lane, j.p.Unit())
	}
	if aerr := d.ack(ctx); aerr != nil {
		// The result is stored: a redelivery finds it there and is
		// acknowledged without being generated again.
		log.Warn("ack failed after result was stored", "err", aerr)
	}
	_, hedged := d.lane.hedgedBy.LoadAndDelete(d.seq)
	if !ours {
		// Another copy's answer was stored first: a hedge, or another
		// delivery after a redelivery. It is the one counted.
		d.lane.n.alreadySettled.Add(1)
		if hedged {
			d.lane.n.hedgedAway.Add(1)
			d.lane.n.hedgedTokens.Add(int64(j.lastTurnTokens()))
			s.metrics.hedged(d.lane.run, "", int64(j.lastTurnTokens()))
			s.metrics.settled(d.lane.run, OutcomeHedged)
		} else {
			s.metrics.settled(d.lane.run, completedOutcome(j))
		}
		log.Debug("answered, but another copy's answer was stored first and is kept")
		return
	}
	if hedged {
		s.hedges.announce(d.lane, schema.HedgeWon, d.seq, j.p.Unit())
	}
	d.lane.n.completed.Add(1)
	s.metrics.settled(d.lane.run, completedOutcome(j))
}

// putAnswer stores the result of j, answered on delivery d, and reports
// whether the result stored is this one (see store.putResult).
func (s *settler) putAnswer(ctx context.Context, d *delivery, j *job) (ours bool, err error) {
	ours, err = s.store.putResult(ctx, j.result(d.attempt, s.name), j.p.Unit(), d.lane.manifest.Needs)
	var readBack *readBackError
	if errors.As(err, &readBack) {
		// Stored, by whichever copy: what matters is that it is.
		j.lane.log.Debug("cannot read back which copy of a result was stored", "id", j.p.ID, "err", err)
		return true, nil
	}
	return ours, err
}

// bury stores the dead letter of j (nil: an undecodable prompt), which
// failed for good with cause, and counts it; it returns why it could
// not.
func (s *settler) bury(ctx context.Context, d *delivery, j *job, reason string, cause error) error {
	if err := s.store.putDeadLetter(ctx, d, j, reason, cause); err != nil {
		return err
	}
	s.buried(d.lane, reason)
	return nil
}

// buried counts a dead letter of l's run, stored with reason.
func (s *settler) buried(l *lane, reason string) {
	l.n.deadLettered.Add(1)
	s.metrics.settled(l.run, deadLetterOutcome(reason))
}

// giveBack hands the prompt of d back to be delivered again, as outcome
// what (Retry, Outage, HandBack, SlowBack, TailBack, Later or Unfit) says, after
// delay for a retry; err is what ended the attempt.
func (s *settler) giveBack(ctx context.Context, d *delivery, what policy.Outcome, delay time.Duration, err error, log *slog.Logger) {
	switch what {
	case policy.Retry:
		d.lane.n.retried.Add(1)
		s.metrics.settled(d.lane.run, OutcomeTransient)
		d.nak(delay, log)
	case policy.Outage:
		d.lane.n.handedBack.Add(1)
		s.metrics.settled(d.lane.run, OutcomeHandedBack)
		d.nak(s.retry.outage, log)
	case policy.HandBack:
		s.metrics.settled(d.lane.run, OutcomeHandedBack)
		d.nak(0, log)
	case policy.SlowBack:
		bounce(d.lane)
		d.lane.n.tailHandedBack.Add(1)
		s.metrics.settled(d.lane.run, OutcomeHandedBack)
		log.Debug("handed back unstarted for a faster worker: its length hint is too long for this server")
		d.nak(hintHandBackDelay, log)
	case policy.TailBack:
		d.lane.n.tailHandedBack.Add(1)
		s.metrics.settled(d.lane.run, OutcomeHandedBack)
		log.Debug("handed back for an idle worker: no first token yet at the end of the run")
		d.nak(0, log)
	case policy.Later:
		s.later(ctx, d, log, "cannot store or read what a delivery keeps in JetStream; prompt handed back to continue later", err)
	case policy.Unfit:
		d.lane.n.handedBack.Add(1)
		s.metrics.settled(d.lane.run, OutcomeHandedBack)
		log.Warn("handed back uncounted: the message needs a feature this worker lacks", "err", err)
		d.nak(s.retry.unfit, log)
	default:
		// Done and HedgedAway are not outcomes of a prompt without an
		// answer of its own.
		d.nak(0, log)
	}
}

// later hands the prompt of d back after the retry delay, saying why
// (the store's trouble, err, not the prompt's); at once, and silently,
// while the worker stops.
func (s *settler) later(ctx context.Context, d *delivery, log *slog.Logger, why string, err error) {
	if ctx.Err() != nil {
		s.metrics.settled(d.lane.run, OutcomeHandedBack)
		d.nak(0, log)
		return
	}
	log.Error(why, "err", err)
	s.metrics.settled(d.lane.run, OutcomeTransient)
	d.nak(retryDelay(d.attempt, s.retry.base, s.retry.max), log)
}

// hintHandBackDelay is how long a prompt handed back by a slow worker
// stays out of the queue: none, since the worker that hands it back
// holds back from the run until its next decision (bounce), and a
// prompt handed back is one a faster worker should start at once.
const hintHandBackDelay = 0

// bounce records that a prompt of l was handed back for its hint: the
// lane pulls nothing more until the next decision (policy.HintHold),
// since the prompts that come next, in a run ordered longest first, are
// as long.
func bounce(l *lane) {
	l.bounced.Store(true)
	l.hintHold.Store(true)
}

// countAgainst records a failure that is the prompt's own and either hands
// the prompt back with a delay growing with its failures, or, when they
// reach the run's MaxAttempts, says to dead-letter it.
func (s *settler) countAgainst(ctx context.Context, j *job, delivery int, err error, log *slog.Logger) (policy.Outcome, string, time.Duration) {
	n, cerr := s.store.countFailure(context.WithoutCancel(ctx), j.lane.run, j.p.Unit())
	if cerr != nil {
		// Without the count, fall back on the delivery count, which can
		// only overstate the prompt's failures.
		log.Warn("cannot count the failure; using the delivery count", "err", cerr)
		n = delivery
	}
	if n >= j.lane.manifest.Policy.Attempts() {
		return policy.DeadLetter, schema.ReasonExhausted, 0
	}
	log.Warn("transient failure; will retry", "failures", n, "err", err)
	return policy.Retry, "", retryDelay(n, s.retry.base, s.retry.max)
}

// hedgedAway ends a delivery whose request was cancelled because a hedge
// on another worker stored its answer first: the prompt is acknowledged
// once the answer is found stored, and handed back at once otherwise
// (the notice cannot have come before the answer was stored, but a
// redelivery costs nothing if it did).
func (s *settler) hedgedAway(ctx context.Context, d *delivery, j *job, log *slog.Logger) {
	d.lane.hedgedBy.Delete(d.seq)
	res, err := s.store.result(ctx, d.lane.run, j.p.Unit())
	if err != nil || res == nil {
		log.Warn("a hedge said it stored this prompt's answer, which cannot be found; handing the prompt back", "err", err)
		s.metrics.settled(d.lane.run, OutcomeHandedBack)
		d.nak(0, log)
		return
	}
	if aerr := d.ack(ctx); aerr != nil {
		log.Warn("ack of a prompt answered by a hedge failed; it comes back and is acknowledged then", "err", aerr)
	}
	d.lane.n.hedgedAway.Add(1)
	s.metrics.settled(d.lane.run, OutcomeHedged)
	log.Debug("answered by a hedge on a faster worker: acknowledged", "hedge", res.Header.Get(schema.HeaderWorker))
}

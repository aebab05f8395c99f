package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// outcome is what happens to a prompt after an attempt.
type outcome int

const (
	// done: publish the result, then acknowledge.
	done outcome = iota
	// retry: count the failure against the prompt, then hand it back with
	// a delay (or dead-letter it when its attempts are used up).
	retry
	// outage: hand the prompt back without counting: its backend is down.
	outage
	// handBack: hand the prompt back at once (this worker is stopping).
	handBack
	// tailBack: hand the prompt back at once for an idle worker: it
	// waited without a first token at the end of the run (tail.go).
	tailBack
	// slowBack: hand the prompt back, unstarted and without counting,
	// for a faster worker (hintlimit.go).
	slowBack
	// hedgedAway: acknowledge without an answer of its own: a hedge on
	// another worker stored the answer first (hedge.go).
	hedgedAway
	// deadLetter: record why, then terminate delivery.
	deadLetter
	// later: hand the prompt back after a delay without counting: NATS
	// could not store or look up a turn, or what an earlier delivery
	// stored, which is not the prompt's fault.
	later
)

// truncatedError is an answer cut at max_tokens that the run's policy does
// not keep.
type truncatedError struct {
	maxTokens, completionTokens int
}

func (e *truncatedError) Error() string {
	return fmt.Sprintf("answer truncated at max_tokens %d (%d completion tokens) and the run's on-length policy does not keep it", e.maxTokens, e.completionTokens)
}

// tooLargeError is an answer larger than the NATS server's max_payload.
type tooLargeError struct{ err error }

func (e *tooLargeError) Error() string { return e.err.Error() }
func (e *tooLargeError) Unwrap() error { return e.err }

// decide maps an attempt's error to an outcome. lastDelivery is true when
// JetStream will not deliver the prompt again; backendDown is true when
// the worker's breaker is open, so the failure is the backend's.
func decide(err error, lastDelivery, backendDown bool) (outcome, string) {
	if err == nil {
		return done, ""
	}
	var trunc *truncatedError
	var large *tooLargeError
	var store *storeError
	switch {
	case errors.Is(err, errSlowForHint):
		return slowBack, ""
	case errors.Is(err, errHedgeWon):
		return hedgedAway, ""
	case errors.Is(err, errTailHandBack):
		return tailBack, ""
	case errors.As(err, &store):
		return later, ""
	case isPoison(err):
		return deadLetter, schema.ReasonPoison
	case errors.As(err, &trunc):
		return deadLetter, schema.ReasonTruncated
	case errors.As(err, &large):
		return deadLetter, schema.ReasonPermanent
	}
	last := func(otherwise outcome) (outcome, string) {
		if lastDelivery {
			return deadLetter, schema.ReasonExhausted
		}
		return otherwise, ""
	}
	switch f := faultOf(err); {
	case openai.Classify(err) == openai.Canceled:
		return handBack, ""
	case f == misconfigured:
		// Credentials refused or model not served: an operator's to fix,
		// never the prompt's.
		return last(outage)
	case f == serverFault && backendDown:
		return last(outage)
	case f == serverFault:
		// A 5xx or an engine failure mid-stream may be the server's alone
		// or caused by this prompt: it counts, up to the run's
		// max_attempts, unless the breaker has put it down to an outage.
		return last(retry)
	case openai.Classify(err) == openai.Permanent:
		return deadLetter, schema.ReasonPermanent
	case backendDown:
		return last(outage)
	}
	return last(retry)
}

// settle ends one delivery with exactly one acknowledgement call. j is
// nil for an undecodable prompt; with no error, j holds its answer.
func (w *Worker) settle(ctx context.Context, d *delivery, j *job, err error) {
	last := d.lane.lastDelivery(d.attempt)
	down, _ := w.breaker.isOpen()
	what, reason := decide(err, last, down)
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
	if what == retry {
		what, reason, delay = w.countAgainst(ctx, j, d.attempt, err, log)
	}
	switch what {
	case done:
		ours, perr := w.publishResult(ctx, d.attempt, j)
		if perr != nil {
			if errors.Is(perr, nats.ErrMaxPayload) {
				// Asking again gives an answer as large: record why instead.
				if j.all {
					j.failed = len(j.turns)
				}
				w.settle(ctx, d, j, &tooLargeError{perr})
				return
			}
			if ctx.Err() != nil {
				w.metrics.settled(d.lane.run, OutcomeHandedBack)
				d.nak(0, log)
				return
			}
			log.Error("cannot store result; prompt will be retried", "err", perr)
			w.metrics.settled(d.lane.run, OutcomeTransient)
			d.nak(retryDelay(d.attempt, w.cfg.RetryBase, w.cfg.RetryMax), log)
			return
		}
		// The stored turns are now part of a result: heartbeats no longer
		// count them as interim.
		j.lane.n.interimTurns.Add(-int64(j.stored))
		j.stored = 0
		if j.all && j.k > 1 {
			// Before the ack, so that a worker that dies in between
			// leaves the prompt to be redelivered, and the turns to be
			// removed then (see settledBefore).
			w.purgeTurns(ctx, j.lane, j.p.Unit())
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
				d.lane.n.hedgedTokens.Add(int64(lastTurnTokens(j)))
				w.metrics.hedged(d.lane.run, "", int64(lastTurnTokens(j)))
				w.metrics.settled(d.lane.run, OutcomeHedged)
			} else {
				w.metrics.settled(d.lane.run, completedOutcome(j))
			}
			log.Debug("answered, but another copy's answer was stored first and is kept")
			return
		}
		if hedged {
			w.announceHedge(d.lane, schema.HedgeWon, d.seq, j.p.Unit())
		}
		d.lane.n.completed.Add(1)
		w.metrics.settled(d.lane.run, completedOutcome(j))
	case hedgedAway:
		w.settleHedgedAway(ctx, d, j, log)
	case retry, outage, handBack, slowBack, tailBack, later:
		w.giveBack(ctx, d, what, delay, err, log)
	case deadLetter:
		log.Warn("dead-lettering prompt", "reason", reason, "err", err)
		if derr := w.publishDeadLetter(ctx, d, j, reason, err); derr != nil {
			if errors.Is(derr, errSuperseded) {
				log.Info("dead letter not stored yet: "+derr.Error(), "retry_in", w.cfg.OutageRetry)
				w.metrics.settled(d.lane.run, OutcomeTransient)
				d.nak(w.cfg.OutageRetry, log)
				return
			}
			log.Error("cannot store dead letter; prompt will be retried", "err", derr)
			w.metrics.settled(d.lane.run, OutcomeTransient)
			d.nak(retryDelay(d.attempt, w.cfg.RetryBase, w.cfg.RetryMax), log)
			return
		}
		d.term(reason, log)
		d.lane.n.deadLettered.Add(1)
		w.metrics.settled(d.lane.run, deadLetterOutcome(reason))
	}
}

// giveBack hands the prompt of d back to be delivered again, as outcome
// what (retry, outage, handBack, slowBack, tailBack or later) says, after
// delay for a retry; err is what ended the attempt.
func (w *Worker) giveBack(ctx context.Context, d *delivery, what outcome, delay time.Duration, err error, log *slog.Logger) {
	switch what {
	case retry:
		d.lane.n.retried.Add(1)
		w.metrics.settled(d.lane.run, OutcomeTransient)
		d.nak(delay, log)
	case outage:
		d.lane.n.handedBack.Add(1)
		w.metrics.settled(d.lane.run, OutcomeHandedBack)
		d.nak(w.cfg.OutageRetry, log)
	case handBack:
		w.metrics.settled(d.lane.run, OutcomeHandedBack)
		d.nak(0, log)
	case slowBack:
		d.lane.bounce()
		d.lane.n.tailHandedBack.Add(1)
		w.metrics.settled(d.lane.run, OutcomeHandedBack)
		log.Debug("handed back unstarted for a faster worker: its length hint is too long for this server")
		d.nak(hintHandBackDelay, log)
	case tailBack:
		d.lane.n.tailHandedBack.Add(1)
		w.metrics.settled(d.lane.run, OutcomeHandedBack)
		log.Debug("handed back for an idle worker: no first token yet at the end of the run")
		d.nak(0, log)
	case later:
		if ctx.Err() != nil {
			w.metrics.settled(d.lane.run, OutcomeHandedBack)
			d.nak(0, log)
			return
		}
		log.Error("cannot store or read what a delivery keeps in JetStream; prompt handed back to continue later", "err", err)
		w.metrics.settled(d.lane.run, OutcomeTransient)
		d.nak(retryDelay(d.attempt, w.cfg.RetryBase, w.cfg.RetryMax), log)
	}
}

// countAgainst records a failure that is the prompt's own and either hands
// the prompt back with a delay growing with its failures, or, when they
// reach the run's MaxAttempts, says to dead-letter it.
func (w *Worker) countAgainst(ctx context.Context, j *job, delivery int, err error, log *slog.Logger) (outcome, string, time.Duration) {
	n, cerr := w.countFailure(context.WithoutCancel(ctx), j.lane.run, j.p.Unit())
	if cerr != nil {
		// Without the count, fall back on the delivery count, which can
		// only overstate the prompt's failures.
		log.Warn("cannot count the failure; using the delivery count", "err", cerr)
		n = delivery
	}
	if n >= j.lane.manifest.Policy.Attempts() {
		return deadLetter, schema.ReasonExhausted, 0
	}
	log.Warn("transient failure; will retry", "failures", n, "err", err)
	return retry, "", retryDelay(n, w.cfg.RetryBase, w.cfg.RetryMax)
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	// deadLetter: record why, then terminate delivery.
	deadLetter
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
	switch {
	case isPoison(err):
		return deadLetter, schema.ReasonPoison
	case errors.As(err, &trunc):
		return deadLetter, schema.ReasonTruncated
	case errors.As(err, &large):
		return deadLetter, schema.ReasonPermanent
	}
	switch openai.Classify(err) {
	case openai.Permanent:
		return deadLetter, schema.ReasonPermanent
	case openai.Canceled:
		return handBack, ""
	}
	// Transient, and Auth: a configuration problem, not the prompt's.
	switch {
	case lastDelivery:
		return deadLetter, schema.ReasonExhausted
	case backendDown:
		return outage, ""
	}
	return retry, ""
}

// settle ends one attempt with exactly one acknowledgement call.
func (w *Worker) settle(ctx context.Context, msg jetstream.Msg, attempt int, p *schema.Prompt, a *answer, err error) {
	last := w.maxDeliver > 0 && attempt >= w.maxDeliver
	down, _ := w.breaker.isOpen()
	what, reason := decide(err, last, down)
	log := w.log.With("subject", msg.Subject(), "delivery", attempt)
	if p != nil {
		log = log.With("id", p.ID)
	}
	var delay time.Duration
	if what == retry {
		what, reason, delay = w.countAgainst(ctx, p, attempt, err, log)
	}
	switch what {
	case done:
		if perr := w.publishResult(ctx, attempt, p, a); perr != nil {
			if errors.Is(perr, nats.ErrMaxPayload) {
				// Asking again gives an answer as large: record why instead.
				w.settle(ctx, msg, attempt, p, nil, &tooLargeError{perr})
				return
			}
			if ctx.Err() != nil {
				w.nak(msg, 0, log)
				return
			}
			log.Error("cannot store result; prompt will be retried", "err", perr)
			w.nak(msg, retryDelay(attempt, w.cfg.RetryBase, w.cfg.RetryMax), log)
			return
		}
		if aerr := w.ack(ctx, msg); aerr != nil {
			// The result is stored: a redelivery will find it there and
			// be acknowledged without a second answer reaching the output.
			log.Warn("ack failed after result was stored", "err", aerr)
		}
		w.completed.Add(1)
	case retry:
		w.retried.Add(1)
		w.nak(msg, delay, log)
	case outage:
		w.handedBack.Add(1)
		w.nak(msg, w.cfg.OutageRetry, log)
	case handBack:
		w.nak(msg, 0, log)
	case deadLetter:
		log.Warn("dead-lettering prompt", "reason", reason, "err", err)
		if derr := w.publishDeadLetter(ctx, msg, attempt, p, reason, err); derr != nil {
			if errors.Is(derr, errSuperseded) {
				log.Info("dead letter not stored yet: "+derr.Error(), "retry_in", w.cfg.OutageRetry)
				w.nak(msg, w.cfg.OutageRetry, log)
				return
			}
			log.Error("cannot store dead letter; prompt will be retried", "err", derr)
			w.nak(msg, retryDelay(attempt, w.cfg.RetryBase, w.cfg.RetryMax), log)
			return
		}
		if terr := msg.TermWithReason(reason); terr != nil {
			log.Warn("terminate failed after dead letter was stored", "err", terr)
		}
		w.deadLettered.Add(1)
	}
}

// countAgainst records a failure that is the prompt's own and either hands
// the prompt back with a delay growing with its failures, or, when they
// reach the run's MaxAttempts, says to dead-letter it.
func (w *Worker) countAgainst(ctx context.Context, p *schema.Prompt, delivery int, err error, log *slog.Logger) (outcome, string, time.Duration) {
	n, cerr := w.countFailure(context.WithoutCancel(ctx), p.ID)
	if cerr != nil {
		// Without the count, fall back on the delivery count, which can
		// only overstate the prompt's failures.
		log.Warn("cannot count the failure; using the delivery count", "err", cerr)
		n = delivery
	}
	if n >= w.manifest.Policy.Attempts() {
		return deadLetter, schema.ReasonExhausted, 0
	}
	if openai.Classify(err) == openai.Auth {
		log.Error("backend refused our credentials; check --api-key-file / AERIE_API_KEY", "err", err)
	} else {
		log.Warn("transient failure; will retry", "failures", n, "err", err)
	}
	return retry, "", retryDelay(n, w.cfg.RetryBase, w.cfg.RetryMax)
}

func (w *Worker) nak(msg jetstream.Msg, delay time.Duration, log *slog.Logger) {
	var err error
	if delay > 0 {
		err = msg.NakWithDelay(delay)
	} else {
		err = msg.Nak()
	}
	if err != nil {
		log.Warn("nak failed; the prompt comes back after AckWait", "err", err)
	}
}

// ack acknowledges msg and waits for the server to confirm, retrying for a
// while: during a cluster leader change acks fail for a few seconds, and a
// lost ack means the prompt is generated a second time.
func (w *Worker) ack(ctx context.Context, msg jetstream.Msg) error {
	var err error
	for i := 1; i <= 8; i++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = msg.DoubleAck(actx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryDelay(i, 200*time.Millisecond, 5*time.Second)):
		}
	}
	return err
}

package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// outcome is what happens to a prompt after an attempt.
type outcome int

const (
	// done: publish the result, then acknowledge.
	done outcome = iota
	// retry: hand the prompt back with a delay (transient failure).
	retry
	// handBack: hand the prompt back at once (this worker is stopping).
	handBack
	// deadLetter: record why, then terminate delivery.
	deadLetter
)

// decide maps an attempt's error to an outcome. lastAttempt is true when
// JetStream will not deliver the prompt again.
func decide(err error, lastAttempt bool) (outcome, string) {
	if err == nil {
		return done, ""
	}
	if isPoison(err) {
		return deadLetter, schema.ReasonPoison
	}
	switch openai.Classify(err) {
	case openai.Permanent:
		return deadLetter, schema.ReasonPermanent
	case openai.Canceled:
		return handBack, ""
	default: // Transient, and Auth: a configuration problem, not the prompt's
		if lastAttempt {
			return deadLetter, schema.ReasonExhausted
		}
		return retry, ""
	}
}

// settle ends one attempt with exactly one acknowledgement call.
func (w *Worker) settle(ctx context.Context, msg jetstream.Msg, attempt int, p *schema.Prompt, comp *openai.Completion, err error) {
	last := w.maxDeliver > 0 && attempt >= w.maxDeliver
	what, reason := decide(err, last)
	log := w.log.With("subject", msg.Subject(), "attempt", attempt)
	if p != nil {
		log = log.With("id", p.ID)
	}
	switch what {
	case done:
		if perr := w.publishResult(ctx, msg, attempt, p, comp); perr != nil {
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
		if openai.Classify(err) == openai.Auth {
			log.Error("backend refused our credentials; check --api-key-file / AERIE_API_KEY", "err", err)
		} else {
			log.Warn("transient failure; will retry", "err", err)
		}
		w.retried.Add(1)
		w.nak(msg, retryDelay(attempt, w.cfg.RetryBase, w.cfg.RetryMax), log)
	case handBack:
		w.nak(msg, 0, log)
	case deadLetter:
		log.Warn("dead-lettering prompt", "reason", reason, "err", err)
		if derr := w.publishDeadLetter(ctx, msg, attempt, p, reason, err); derr != nil {
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

func (w *Worker) nak(msg jetstream.Msg, delay time.Duration, log interface{ Warn(string, ...any) }) {
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

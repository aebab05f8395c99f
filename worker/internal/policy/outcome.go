package policy

import (
	"errors"
	"fmt"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// Outcome is what happens to a prompt after an attempt: one
// acknowledgement call each.
type Outcome int

const (
	// Done: publish the result, then acknowledge.
	Done Outcome = iota
	// Retry: count the failure against the prompt, then hand it back with
	// a delay (or dead-letter it when its attempts are used up).
	Retry
	// Outage: hand the prompt back without counting: its backend is down.
	Outage
	// HandBack: hand the prompt back at once (this worker is stopping).
	HandBack
	// TailBack: hand the prompt back at once for an idle worker: it
	// waited without a first token at the end of the run.
	TailBack
	// SlowBack: hand the prompt back, unstarted and without counting,
	// for a faster worker (see HintLimit).
	SlowBack
	// HedgedAway: acknowledge without an answer of its own: a hedge on
	// another worker stored the answer first.
	HedgedAway
	// DeadLetter: record why, then terminate delivery.
	DeadLetter
	// Later: hand the prompt back after a delay without counting: NATS
	// could not store or look up a turn, or what an earlier delivery
	// stored, which is not the prompt's fault.
	Later
	// Unfit: hand the prompt back without counting, once this worker's
	// open pull is over, for a worker that has a feature the message
	// needs and this one lacks (schema.LackError).
	Unfit
)

// Why an attempt ended without an answer of its own, besides the
// backend's failures.
var (
	// ErrTailHandBack ends a request cancelled by the tail hand-back.
	ErrTailHandBack = errors.New("handed back at the end of the run for an idle worker: it had waited without a first token")
	// ErrSlowForHint ends a prompt that a slow worker hands back: its
	// length hint says a faster worker should answer it.
	ErrSlowForHint = errors.New("handed back unstarted: its length hint is too long for this worker's server, which is much slower than the run's other workers")
	// ErrHedgeWon ends a request whose answer a hedge on another worker
	// stored first.
	ErrHedgeWon = errors.New("cancelled: a hedge of this request on a faster worker stored its answer first")
)

// TruncatedError is an answer cut at max_tokens that the run's policy
// does not keep.
type TruncatedError struct {
	MaxTokens, CompletionTokens int
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("answer truncated at max_tokens %d (%d completion tokens) and the run's on-length policy does not keep it", e.MaxTokens, e.CompletionTokens)
}

// TooLargeError is an answer larger than the NATS server's max_payload.
type TooLargeError struct{ Err error }

func (e *TooLargeError) Error() string { return e.Err.Error() }
func (e *TooLargeError) Unwrap() error { return e.Err }

// StoreError is a failure to read or write what a delivery keeps in
// JetStream (a turn, or what an earlier delivery stored): NATS trouble,
// not the prompt's. The prompt is handed back to continue later.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// PoisonError marks a prompt message that cannot be decoded.
type PoisonError struct{ Err error }

func (e *PoisonError) Error() string { return "undecodable prompt message: " + e.Err.Error() }
func (e *PoisonError) Unwrap() error { return e.Err }

// Settle maps an attempt's error to an outcome, and the reason of a dead
// letter. lastDelivery is true when JetStream will not deliver the
// prompt again; backendDown is true when the worker's breaker is open,
// so the failure is the backend's.
func Settle(err error, lastDelivery, backendDown bool) (Outcome, string) {
	if err == nil {
		return Done, ""
	}
	var trunc *TruncatedError
	var large *TooLargeError
	var store *StoreError
	var poison *PoisonError
	var lack *schema.LackError
	switch {
	case errors.As(err, &lack):
		// Not the prompt's failure, nor this attempt's: a worker that
		// has the feature answers it.
		return Unfit, ""
	case errors.Is(err, ErrSlowForHint):
		return SlowBack, ""
	case errors.Is(err, ErrHedgeWon):
		return HedgedAway, ""
	case errors.Is(err, ErrTailHandBack):
		return TailBack, ""
	case errors.As(err, &store):
		return Later, ""
	case errors.As(err, &poison):
		return DeadLetter, schema.ReasonPoison
	case errors.As(err, &trunc):
		return DeadLetter, schema.ReasonTruncated
	case errors.As(err, &large):
		return DeadLetter, schema.ReasonPermanent
	}
	last := func(otherwise Outcome) (Outcome, string) {
		if lastDelivery {
			return DeadLetter, schema.ReasonExhausted
		}
		return otherwise, ""
	}
	f := Classify(err)
	switch {
	case f.Class == openai.Canceled:
		return HandBack, ""
	case f.Fault == Misconfigured:
		// Credentials refused or model not served: an operator's to fix,
		// never the prompt's.
		return last(Outage)
	case f.Fault == ServerFault && backendDown:
		return last(Outage)
	case f.Fault == ServerFault:
		// A 5xx or an engine failure mid-stream may be the server's alone
		// or caused by this prompt: it counts, up to the run's
		// max_attempts, unless the breaker has put it down to an outage.
		return last(Retry)
	case f.Class == openai.Permanent:
		return DeadLetter, schema.ReasonPermanent
	case backendDown:
		return last(Outage)
	}
	return last(Retry)
}

package policy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aerie-dev/aerie/openai"
)

// Fault is what the error of one request says about the backend, as
// opposed to about the prompt.
type Fault int

const (
	// NoFault: the request succeeded, or ended with the worker's own
	// context, which says nothing about the backend.
	NoFault Fault = iota
	// Answered: the backend answered and refused this one request (400,
	// 429): it is up, and the request's own fate is decided elsewhere.
	Answered
	// ServerFault: the backend is failing: a 5xx, an error it sent in the
	// middle of a stream (an engine failure after generation started), a
	// connection refused or cut, no answer in time. A run of them with no
	// success in between pauses the worker.
	ServerFault
	// Misconfigured: no request can succeed until an operator acts: the
	// backend refuses our credentials (401, 403, an untrusted
	// certificate) or does not serve the run's model (404, say after a
	// restart under another name). The worker pauses at once, and no
	// failure counts against the prompt.
	Misconfigured
)

// Failure is a failed request as classified once, where it ended: whose
// fault it was (Fault) and what the openai package says to do with the
// request (Class). The breaker, the metrics and Settle all read it.
type Failure struct {
	Err   error
	Fault Fault
	Class openai.Class
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Classify is the failure of a request that ended with err; nil for nil.
func Classify(err error) *Failure {
	if err == nil {
		return nil
	}
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return &Failure{Err: err, Fault: FaultOf(err), Class: openai.Classify(err)}
}

// ErrNoTokenIDs is the error of an answer without the token ids the run
// asks for (return_token_ids): a backend that ignores the parameter
// (vLLM before 0.10.2, another server) would fill the run with answers
// that its token-id exports cannot use. It is a misconfigured backend:
// the worker pauses and hands the prompt back, as for a model not
// served, until a probe gets an answer with ids.
var ErrNoTokenIDs = errors.New("the backend answered without the token ids the run asks for (return_token_ids): vLLM returns them from 0.10.2 on; upgrade the server, or point --backend at one that returns them")

// PriorityRefused reports whether err is a server's refusal of request
// priorities: vLLM without --scheduling-policy priority answers any
// priority but 0 with a 400 that says so. Every request of a worker that
// yields to serving traffic would be refused: the backend is
// misconfigured for it, not the prompt at fault.
func PriorityRefused(err error) bool {
	var apiErr *openai.APIError
	return errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest &&
		strings.Contains(apiErr.Error(), "Priority scheduling is not enabled")
}

// PriorityFix is what a worker paused for refused priorities says.
const PriorityFix = "the backend refuses request priorities (--yield-to-serving sends them): start vLLM with --scheduling-policy priority, or run the worker without --yield-to-serving"

// BadFileError is a server's hidden-states file that cannot be
// published: missing after its reply, cut, of another prompt, not
// finite, or still being written long after the reply. It is the
// server's fault: the attempt is retried, and a run of them opens the
// breaker.
type BadFileError struct {
	Path string
	Err  error
}

func (e *BadFileError) Error() string {
	return fmt.Sprintf("the server's hidden-states file %s: %v", e.Path, e.Err)
}

func (e *BadFileError) Unwrap() error { return e.Err }

// AbortedError is an answer the server ended itself before it was done:
// vLLM's finish_reason "abort" (the engine aborted the request) or
// "error". The partial answer is not stored: the prompt is tried again,
// as after a transient failure of the server.
type AbortedError struct {
	Reason string
	Tokens int
}

func (e *AbortedError) Error() string {
	return fmt.Sprintf("the server ended the answer itself (finish_reason %q) after %d tokens: not stored, tried again", e.Reason, e.Tokens)
}

// Aborted returns the error of an answer the server ended itself
// (finish_reason "abort" or "error", after tokens), nil for one that
// stopped or reached its length.
func Aborted(finishReason string, tokens int) error {
	if finishReason != "abort" && finishReason != "error" {
		return nil
	}
	return &AbortedError{Reason: finishReason, Tokens: tokens}
}

// AnswerFault is what makes an answer unusable: one of its choices ended
// by the server, or token ids missing where the run asks for them (ids
// set): the prompt's when none came, a choice's when it generated
// tokens without them.
func AnswerFault(c *openai.Completion, ids bool) error {
	if c == nil {
		return nil
	}
	choices := c.Choices
	if len(choices) == 0 {
		choices = []openai.Choice{{FinishReason: c.FinishReason, CompletionTokens: c.Usage.CompletionTokens, TokenIDs: c.TokenIDs}}
	}
	for _, ch := range choices {
		if err := Aborted(ch.FinishReason, ch.CompletionTokens); err != nil {
			return err
		}
		if ids && (len(c.PromptTokenIDs) == 0 || len(ch.TokenIDs) == 0 && ch.CompletionTokens > 0) {
			return ErrNoTokenIDs
		}
	}
	return nil
}

// LacksTokenIDs reports whether an answer that generated tokens came
// without its prompt's or its own token ids.
func LacksTokenIDs(c *openai.Completion) bool {
	return c != nil && (len(c.PromptTokenIDs) == 0 || len(c.TokenIDs) == 0 && c.Usage.CompletionTokens > 0)
}

// FaultOf classifies err. The classes of the openai package say what to
// do with the request; this says whose fault it was.
func FaultOf(err error) Fault {
	if err == nil {
		return NoFault
	}
	if errors.Is(err, ErrNoTokenIDs) || PriorityRefused(err) {
		return Misconfigured
	}
	if errors.Is(err, openai.ErrNoExtraction) {
		return Misconfigured
	}
	var ab *AbortedError
	var bad *BadFileError
	if errors.As(err, &ab) || errors.As(err, &bad) || errors.Is(err, openai.ErrPromptMismatch) {
		return ServerFault
	}
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.InStream():
			return ServerFault // sent after the server had accepted the request
		case apiErr.Status == http.StatusNotFound:
			return Misconfigured
		case apiErr.Status >= 500:
			return ServerFault
		}
	}
	switch openai.Classify(err) {
	case openai.Canceled:
		return NoFault
	case openai.Auth:
		return Misconfigured
	case openai.Transient:
		if apiErr != nil {
			return Answered // 408, 409, 425, 429: it is up and said so
		}
		return ServerFault // network, timeouts, cut or malformed streams
	}
	return Answered
}

package worker

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aerie-dev/aerie/openai"
)

// fault is what the error of one request says about the backend, as
// opposed to about the prompt.
type fault int

const (
	// noFault: the request succeeded, or ended with the worker's own
	// context, which says nothing about the backend.
	noFault fault = iota
	// answered: the backend answered and refused this one request (400,
	// 429): it is up, and the request's own fate is decided elsewhere.
	answered
	// serverFault: the backend is failing: a 5xx, an error it sent in the
	// middle of a stream (an engine failure after generation started), a
	// connection refused or cut, no answer in time. A run of them with no
	// success in between pauses the worker.
	serverFault
	// misconfigured: no request can succeed until an operator acts: the
	// backend refuses our credentials (401, 403, an untrusted
	// certificate) or does not serve the run's model (404, say after a
	// restart under another name). The worker pauses at once, and no
	// failure counts against the prompt.
	misconfigured
)

// errNoTokenIDs is the error of an answer without the token ids the run
// asks for (return_token_ids): a backend that ignores the parameter
// (vLLM before 0.10.2, another server) would fill the run with answers
// that its token-id exports cannot use. It is a misconfigured backend:
// the worker pauses and hands the prompt back, as for a model not
// served, until a probe gets an answer with ids.
var errNoTokenIDs = errors.New("the backend answered without the token ids the run asks for (return_token_ids): vLLM returns them from 0.10.2 on; upgrade the server, or point --backend at one that returns them")

// priorityRefused reports whether err is a server's refusal of request
// priorities: vLLM without --scheduling-policy priority answers any
// priority but 0 with a 400 that says so. Every request of a worker that
// yields to serving traffic would be refused: the backend is
// misconfigured for it, not the prompt at fault.
func priorityRefused(err error) bool {
	var apiErr *openai.APIError
	return errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest &&
		strings.Contains(apiErr.Error(), "Priority scheduling is not enabled")
}

// priorityFix is what a worker paused for refused priorities says.
const priorityFix = "the backend refuses request priorities (--yield-to-serving sends them): start vLLM with --scheduling-policy priority, or run the worker without --yield-to-serving"

// abortedError is an answer the server ended itself before it was done:
// vLLM's finish_reason "abort" (the engine aborted the request) or
// "error". The partial answer is not stored: the prompt is tried again,
// as after a transient failure of the server.
type abortedError struct {
	reason string
	tokens int
}

func (e *abortedError) Error() string {
	return fmt.Sprintf("the server ended the answer itself (finish_reason %q) after %d tokens: not stored, tried again", e.reason, e.tokens)
}

// aborted returns the abortedError of an answer the server ended itself,
// nil for one that stopped or reached its length.
func aborted(c *openai.Completion) error {
	if c == nil || c.FinishReason != "abort" && c.FinishReason != "error" {
		return nil
	}
	return &abortedError{reason: c.FinishReason, tokens: c.Usage.CompletionTokens}
}

// lacksTokenIDs reports whether an answer that generated tokens came
// without its prompt's or its own token ids.
func lacksTokenIDs(c *openai.Completion) bool {
	return c != nil && (len(c.PromptTokenIDs) == 0 || (len(c.TokenIDs) == 0 && c.Usage.CompletionTokens > 0))
}

// faultOf classifies err. The classes of the openai package say what to
// do with the request; this says whose fault it was.
func faultOf(err error) fault {
	if err == nil {
		return noFault
	}
	if errors.Is(err, errNoTokenIDs) || priorityRefused(err) {
		return misconfigured
	}
	var ab *abortedError
	if errors.As(err, &ab) {
		return serverFault
	}
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.InStream():
			return serverFault // sent after the server had accepted the request
		case apiErr.Status == http.StatusNotFound:
			return misconfigured
		case apiErr.Status >= 500:
			return serverFault
		}
	}
	switch openai.Classify(err) {
	case openai.Canceled:
		return noFault
	case openai.Auth:
		return misconfigured
	case openai.Transient:
		if apiErr != nil {
			return answered // 408, 409, 425, 429: it is up and said so
		}
		return serverFault // network, timeouts, cut or malformed streams
	}
	return answered
}

package policy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

func TestSettle(t *testing.T) {
	status := func(s int) error { return &openai.APIError{Status: s} }
	for _, tc := range []struct {
		name   string
		err    error
		last   bool
		want   Outcome
		reason string
		down   bool
	}{
		{"success", nil, false, Done, "", false},
		{"success on last attempt", nil, true, Done, "", false},
		{"context length", status(400), false, DeadLetter, schema.ReasonPermanent, false},
		{"queue full", status(429), false, Retry, "", false},
		{"queue full, last attempt", status(429), true, DeadLetter, schema.ReasonExhausted, false},
		{"overloaded", status(503), false, Retry, "", false},
		{"bad key", status(401), false, Outage, "", false},
		{"key refused", status(403), false, Outage, "", true},
		{"bad key, last attempt", status(401), true, DeadLetter, schema.ReasonExhausted, false},
		{"model not served", &openai.APIError{Status: 404, Type: "NotFoundError"}, false, Outage, "", false},
		{"engine error inside the stream", &openai.APIError{Type: "BadRequestError", Code: "400"}, false, Retry, "", false},
		{"engine error inside the stream while down", &openai.APIError{Type: "BadRequestError", Code: "400"}, false, Outage, "", true},
		{"server error", status(500), false, Retry, "", false},
		{"worker stopping", context.Canceled, false, HandBack, "", false},
		{"handed back at the end of the run", fmt.Errorf("%w: %w", ErrTailHandBack, context.Canceled), false, TailBack, "", false},
		{"worker stopping, last attempt", context.Canceled, true, HandBack, "", false},
		{"garbage prompt", &PoisonError{Err: errors.New("bad msgpack")}, false, DeadLetter, schema.ReasonPoison, false},
		{"wrapped transient", fmt.Errorf("x: %w", status(502)), false, Retry, "", false},
		{"backend down", status(503), false, Outage, "", true},
		{"backend down, last delivery", status(503), true, DeadLetter, schema.ReasonExhausted, true},
		{"context length while down", status(400), false, DeadLetter, schema.ReasonPermanent, true},
		{"truncated", &TruncatedError{MaxTokens: 10}, false, DeadLetter, schema.ReasonTruncated, false},
	} {
		got, reason := Settle(tc.err, tc.last, tc.down)
		if got != tc.want || reason != tc.reason {
			t.Errorf("%s: Settle = %v %q, want %v %q", tc.name, got, reason, tc.want, tc.reason)
		}
	}
}

func TestNextBudget(t *testing.T) {
	for _, tc := range []struct{ current, limit, runMax, want int }{
		{100, 0, 100, 200},
		{200, 0, 100, 400},
		{400, 0, 100, 400}, // at the default cap of 4x
		{300, 500, 100, 500},
		{500, 500, 100, 500},
		{0, 1000, 0, 0}, // unset: the context window was the limit
	} {
		if got := NextBudget(tc.current, tc.limit, tc.runMax); got != tc.want {
			t.Errorf("NextBudget(%d, %d, %d) = %d, want %d", tc.current, tc.limit, tc.runMax, got, tc.want)
		}
	}
}

func TestFaultOf(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err  error
		want Fault
	}{
		{nil, NoFault},
		{context.Canceled, NoFault},
		{&openai.APIError{Status: 503}, ServerFault},
		{&openai.APIError{Status: 502}, ServerFault},
		{&openai.APIError{Status: 500}, ServerFault},
		{&openai.APIError{Type: "BadRequestError", Code: "400"}, ServerFault}, // sent inside a stream
		{fmt.Errorf("chat: %w", refused), ServerFault},
		{&openai.APIError{Status: 429}, Answered},
		{&openai.APIError{Status: 400}, Answered},
		{&openai.APIError{Status: 401}, Misconfigured},
		{&openai.APIError{Status: 403}, Misconfigured},
		{&openai.APIError{Status: 404, Type: "NotFoundError"}, Misconfigured},
	} {
		if got := FaultOf(tc.err); got != tc.want {
			t.Errorf("FaultOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Settle reads a failure classified where its request ended, and
// classifies an error that was not the same way.
func TestSettleReadsTheClassification(t *testing.T) {
	err := &openai.APIError{Status: 503}
	for _, e := range []error{err, Classify(err), fmt.Errorf("wrapped: %w", Classify(err))} {
		if got, _ := Settle(e, false, false); got != Retry {
			t.Errorf("%#v: %v, want Retry", e, got)
		}
	}
	f := Classify(Classify(err))
	if f.Err != err || f.Fault != ServerFault || f.Class != openai.Transient {
		t.Errorf("classified twice: %+v", f)
	}
	if Classify(nil) != nil {
		t.Error("a success classified as a failure")
	}
}

func TestOnLength(t *testing.T) {
	for _, tc := range []struct {
		name      string
		p         schema.Policy
		maxTokens int
		next      int
		refused   bool
	}{
		{"kept", schema.Policy{OnLength: schema.OnLengthKeep}, 100, 0, false},
		{"refused", schema.Policy{OnLength: schema.OnLengthDeadLetter}, 100, 0, true},
		{"asked again with twice as many", schema.Policy{OnLength: schema.OnLengthRetry}, 100, 200, false},
		{"refused at the cap", schema.Policy{OnLength: schema.OnLengthRetry}, 400, 0, true},
	} {
		next, err := OnLength(tc.p, tc.maxTokens, 100, tc.maxTokens)
		var trunc *TruncatedError
		if next != tc.next || errors.As(err, &trunc) != tc.refused {
			t.Errorf("%s: next %d, err %v; want %d, refused %v", tc.name, next, err, tc.next, tc.refused)
		}
	}
}

// An answer the server ended itself, or one without the token ids asked
// for, is a failure; for several answers, any of them.
func TestAnswerFault(t *testing.T) {
	ids := []int{1}
	for _, tc := range []struct {
		name string
		c    *openai.Completion
		ids  bool
		want error
	}{
		{"a whole answer", &openai.Completion{FinishReason: "stop"}, false, nil},
		{"aborted", &openai.Completion{FinishReason: "abort", Usage: openai.Usage{CompletionTokens: 3}}, false, &AbortedError{Reason: "abort", Tokens: 3}},
		{"ids asked for and none", &openai.Completion{FinishReason: "stop", Usage: openai.Usage{CompletionTokens: 3}}, true, ErrNoTokenIDs},
		{"ids asked for and sent", &openai.Completion{FinishReason: "stop", PromptTokenIDs: ids, TokenIDs: ids, Usage: openai.Usage{CompletionTokens: 1}}, true, nil},
		{"one of several aborted", &openai.Completion{Choices: []openai.Choice{{FinishReason: "stop"}, {FinishReason: "error"}}}, false, &AbortedError{Reason: "error"}},
		{"one of several without its ids", &openai.Completion{PromptTokenIDs: ids, Choices: []openai.Choice{{FinishReason: "stop", TokenIDs: ids, CompletionTokens: 1}, {FinishReason: "stop", CompletionTokens: 2}}}, true, ErrNoTokenIDs},
	} {
		got := AnswerFault(tc.c, tc.ids)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

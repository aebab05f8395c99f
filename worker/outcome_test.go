package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

func TestDecide(t *testing.T) {
	status := func(s int) error { return &openai.APIError{Status: s} }
	for _, tc := range []struct {
		name   string
		err    error
		last   bool
		want   outcome
		reason string
		down   bool
	}{
		{"success", nil, false, done, "", false},
		{"success on last attempt", nil, true, done, "", false},
		{"context length", status(400), false, deadLetter, schema.ReasonPermanent, false},
		{"queue full", status(429), false, retry, "", false},
		{"queue full, last attempt", status(429), true, deadLetter, schema.ReasonExhausted, false},
		{"overloaded", status(503), false, retry, "", false},
		{"bad key", status(401), false, outage, "", false},
		{"key refused", status(403), false, outage, "", true},
		{"bad key, last attempt", status(401), true, deadLetter, schema.ReasonExhausted, false},
		{"model not served", &openai.APIError{Status: 404, Type: "NotFoundError"}, false, outage, "", false},
		{"engine error inside the stream", &openai.APIError{Type: "BadRequestError", Code: "400"}, false, retry, "", false},
		{"engine error inside the stream while down", &openai.APIError{Type: "BadRequestError", Code: "400"}, false, outage, "", true},
		{"server error", status(500), false, retry, "", false},
		{"worker stopping", context.Canceled, false, handBack, "", false},
		{"handed back at the end of the run", fmt.Errorf("%w: %w", errTailHandBack, context.Canceled), false, tailBack, "", false},
		{"worker stopping, last attempt", context.Canceled, true, handBack, "", false},
		{"garbage prompt", poison(errors.New("bad msgpack")), false, deadLetter, schema.ReasonPoison, false},
		{"wrapped transient", fmt.Errorf("x: %w", status(502)), false, retry, "", false},
		{"backend down", status(503), false, outage, "", true},
		{"backend down, last delivery", status(503), true, deadLetter, schema.ReasonExhausted, true},
		{"context length while down", status(400), false, deadLetter, schema.ReasonPermanent, true},
		{"truncated", &truncatedError{maxTokens: 10}, false, deadLetter, schema.ReasonTruncated, false},
	} {
		got, reason := decide(tc.err, tc.last, tc.down)
		if got != tc.want || reason != tc.reason {
			t.Errorf("%s: decide = %v %q, want %v %q", tc.name, got, reason, tc.want, tc.reason)
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
		if got := nextBudget(tc.current, tc.limit, tc.runMax); got != tc.want {
			t.Errorf("nextBudget(%d, %d, %d) = %d, want %d", tc.current, tc.limit, tc.runMax, got, tc.want)
		}
	}
}

func TestFaultOf(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err  error
		want fault
	}{
		{nil, noFault},
		{context.Canceled, noFault},
		{&openai.APIError{Status: 503}, serverFault},
		{&openai.APIError{Status: 502}, serverFault},
		{&openai.APIError{Status: 500}, serverFault},
		{&openai.APIError{Type: "BadRequestError", Code: "400"}, serverFault}, // sent inside a stream
		{fmt.Errorf("chat: %w", refused), serverFault},
		{&openai.APIError{Status: 429}, answered},
		{&openai.APIError{Status: 400}, answered},
		{&openai.APIError{Status: 401}, misconfigured},
		{&openai.APIError{Status: 403}, misconfigured},
		{&openai.APIError{Status: 404, Type: "NotFoundError"}, misconfigured},
	} {
		if got := faultOf(tc.err); got != tc.want {
			t.Errorf("faultOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	for attempt := 1; attempt <= 12; attempt++ {
		nominal := min(time.Second<<(attempt-1), time.Minute)
		for range 50 {
			d := retryDelay(attempt, time.Second, time.Minute)
			if d < nominal/2 || d >= nominal*3/2 {
				t.Fatalf("attempt %d: delay %v outside [%v, %v)", attempt, d, nominal/2, nominal*3/2)
			}
		}
	}
}

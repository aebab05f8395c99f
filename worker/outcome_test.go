package worker

import (
	"context"
	"errors"
	"fmt"
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
		{"bad key", status(401), false, retry, "", false},
		{"bad key, last attempt", status(401), true, deadLetter, schema.ReasonExhausted, false},
		{"worker stopping", context.Canceled, false, handBack, "", false},
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

func TestBackendDown(t *testing.T) {
	for _, tc := range []struct {
		err  error
		down bool
	}{
		{nil, false},
		{&openai.APIError{Status: 503}, true},
		{&openai.APIError{Status: 502}, true},
		{&openai.APIError{Status: 500}, false},
		{&openai.APIError{Status: 429}, false},
		{&openai.APIError{Status: 400}, false},
		{context.Canceled, false},
	} {
		if got := backendDown(tc.err); got != tc.down {
			t.Errorf("backendDown(%v) = %v", tc.err, got)
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

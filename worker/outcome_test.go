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
	}{
		{"success", nil, false, done, ""},
		{"success on last attempt", nil, true, done, ""},
		{"context length", status(400), false, deadLetter, schema.ReasonPermanent},
		{"queue full", status(429), false, retry, ""},
		{"queue full, last attempt", status(429), true, deadLetter, schema.ReasonExhausted},
		{"overloaded", status(503), false, retry, ""},
		{"bad key", status(401), false, retry, ""},
		{"bad key, last attempt", status(401), true, deadLetter, schema.ReasonExhausted},
		{"worker stopping", context.Canceled, false, handBack, ""},
		{"worker stopping, last attempt", context.Canceled, true, handBack, ""},
		{"garbage prompt", poison(errors.New("bad msgpack")), false, deadLetter, schema.ReasonPoison},
		{"wrapped transient", fmt.Errorf("x: %w", status(502)), false, retry, ""},
	} {
		got, reason := decide(tc.err, tc.last)
		if got != tc.want || reason != tc.reason {
			t.Errorf("%s: decide = %v %q, want %v %q", tc.name, got, reason, tc.want, tc.reason)
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

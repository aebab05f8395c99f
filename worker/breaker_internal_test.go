package worker

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// A run of server faults opens the breaker at the threshold when the
// server cannot be asked whether it is up, or says it is down; while its
// health check passes, only healthyFactor times the threshold does.
func TestBreakerWantsEvidence(t *testing.T) {
	fault := &openai.APIError{Status: http.StatusServiceUnavailable}
	up := func(context.Context) error { return nil }
	down := func(context.Context) error { return errors.New("connection refused") }
	for _, c := range []struct {
		name   string
		health func(context.Context) error
		opens  int // the fault that opens it
	}{
		{"no health check", nil, 5},
		{"health fails", down, 5},
		{"health passes", up, 5 * healthyFactor},
	} {
		var asked atomic.Int64
		health := c.health
		if health != nil {
			h := c.health
			health = func(ctx context.Context) error { asked.Add(1); return h(ctx) }
		}
		b := newBreaker(5, func(context.Context) error { return nil }, health, nil, nil)
		for i := 1; i <= c.opens; i++ {
			open := b.record(policy.Classify(fault))
			if open != (i == c.opens) {
				t.Errorf("%s: fault %d: open %v, want open from fault %d", c.name, i, open, c.opens)
				break
			}
		}
		if c.health != nil && asked.Load() == 0 {
			t.Errorf("%s: health never asked", c.name)
		}
	}
	// A success between faults starts the count again.
	b := newBreaker(5, func(context.Context) error { return nil }, up, nil, nil)
	for range 3 * healthyFactor {
		for range 4 {
			b.record(policy.Classify(fault))
		}
		b.record(nil)
	}
	if open, _ := b.isOpen(); open {
		t.Error("faults with successes between opened the breaker")
	}
}

package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A pull that found no consumer leader (a cluster electing one) is
// tried again within a second, not after the 5 s other failures back
// off to; the error reaches pull wrapped, as fetch returns it.
func TestPullRetryMax(t *testing.T) {
	for _, c := range []struct {
		err  error
		want time.Duration
	}{
		{fmt.Errorf("pull the prompts of run r: %w", nats.ErrNoResponders), time.Second},
		{fmt.Errorf("pull the prompts of run r: %w", nats.ErrConnectionClosed), 5 * time.Second},
		{errors.New("anything else"), 5 * time.Second},
	} {
		if got := pullRetryMax(c.err); got != c.want {
			t.Errorf("pullRetryMax(%v) = %v, want %v", c.err, got, c.want)
		}
		// retryDelay's jitter keeps it within 1.5 times the bound.
		for attempt := 1; attempt <= 10; attempt++ {
			if d := retryDelay(attempt, 100*time.Millisecond, pullRetryMax(c.err)); d > c.want*3/2 {
				t.Errorf("attempt %d of %v waits %v, over 1.5 x %v", attempt, c.err, d, c.want)
			}
		}
	}
}

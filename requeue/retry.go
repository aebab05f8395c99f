package requeue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// request makes one request to the server, each attempt bounded by
// o.Timeout, and makes it again after a pause when the failure may be
// transient. Every request made through it can be repeated safely: reads
// change nothing, purges stop at a sequence already seen, and a publish
// repeats its message id and expects the subject to be empty.
func request(ctx context.Context, o Options, what string, fn func(ctx context.Context) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, o.Timeout)
		err = fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !transient(err) || attempt >= o.Attempts {
			return fmt.Errorf("%s: %w", what, err)
		}
		t := time.NewTimer(min(retryBase<<(attempt-1), retryMax))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (stopped while retrying)", what, err)
		case <-t.C:
		}
	}
}

// transient reports whether another attempt of a failed request may
// succeed: the server did not answer, or answered that it is temporarily
// unable to.
func transient(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503 &&
			apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabled &&
			apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabledForAccount
	}
	return false
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// countFailure adds one to the failures of a unit that count against its
// attempts and returns the new count. The count lives in the attempts
// bucket, not in JetStream's delivery count, because deliveries also count
// hand-backs during outages and crashed workers, which are not the
// prompt's fault.
func (s *store) countFailure(ctx context.Context, run string, u schema.Unit) (int, error) {
	key := schema.AttemptsKey(run, u)
	promptID := u.ID
	for range 10 {
		e, err := s.attempts.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err := s.attempts.Create(ctx, key, []byte("1")); err == nil {
				return 1, nil
			} else if !errors.Is(err, jetstream.ErrKeyExists) {
				return 0, fmt.Errorf("count failure of %s: %w", promptID, err)
			}
		case err != nil:
			return 0, fmt.Errorf("count failure of %s: %w", promptID, err)
		default:
			n, _ := strconv.Atoi(string(e.Value()))
			n++
			if _, err := s.attempts.Update(ctx, key, []byte(strconv.Itoa(n)), e.Revision()); err == nil {
				return n, nil
			}
			// Another worker counted at the same time: read again.
		}
	}
	return 0, fmt.Errorf("count failure of %s: too much contention on key %s", promptID, key)
}

// forgetFailures deletes the failure count of unit u of run, best effort,
// logging to log when it cannot.
func (s *store) forgetFailures(ctx context.Context, run string, u schema.Unit, log *slog.Logger) {
	key := schema.AttemptsKey(run, u)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.attempts.Delete(dctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		log.Warn("cannot reset the failure count after a stored turn; the next turn has fewer attempts", "id", u.ID, "key", key, "err", err)
	}
}

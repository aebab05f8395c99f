package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// countFailure adds one to the failures of a unit that count against its
// attempts and returns the new count. The count lives in the attempts
// bucket, not in JetStream's delivery count, because deliveries also count
// hand-backs during outages and crashed workers, which are not the
// prompt's fault.
func (w *Worker) countFailure(ctx context.Context, run string, u schema.Unit) (int, error) {
	key := schema.AttemptsKey(run, u)
	promptID := u.ID
	for range 10 {
		e, err := w.attempts.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err := w.attempts.Create(ctx, key, []byte("1")); err == nil {
				return 1, nil
			} else if !errors.Is(err, jetstream.ErrKeyExists) {
				return 0, fmt.Errorf("count failure of %s: %w", promptID, err)
			}
		case err != nil:
			return 0, fmt.Errorf("count failure of %s: %w", promptID, err)
		default:
			n, _ := strconv.Atoi(string(e.Value()))
			n++
			if _, err := w.attempts.Update(ctx, key, []byte(strconv.Itoa(n)), e.Revision()); err == nil {
				return n, nil
			}
			// Another worker counted at the same time: read again.
		}
	}
	return 0, fmt.Errorf("count failure of %s: too much contention on key %s", promptID, key)
}

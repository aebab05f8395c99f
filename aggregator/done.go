package aggregator

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// doneSettle is how long a run must stay complete before it is declared
// done. `aerie replay` queues a prompt again a moment before it removes
// its dead letter; a run found complete twice, this far apart, has no
// replay caught half way.
const doneSettle = time.Second

// confirmDone decides whether a run whose counts add up is done: every
// prompt has its final outcome written. The counts can be stale: a replay
// may have queued failed prompts again (refresh takes their lines out of
// failed.jsonl), and a prompt queued and not yet delivered (a replay or
// reconcile under way) is not final. So the run must be found complete
// with nothing queued twice, doneSettle apart. Called from the event
// loop only; a false answer schedules the next look.
//
// A run whose every unit has a completion is done at once: a completion
// is final (a replay reopens failed units only), so no look later can
// find it otherwise, and its end is reported as soon as its last line
// is written.
func (a *Aggregator) confirmDone(ctx context.Context, now time.Time) bool {
	if !a.complete.IsZero() && now.Sub(a.complete) < doneSettle {
		return false // a look is scheduled
	}
	if !a.completeNow(ctx) {
		a.complete = time.Time{}
		return false
	}
	if a.allCompleted() {
		return true
	}
	if a.complete.IsZero() {
		a.complete = now
		time.AfterFunc(doneSettle, a.kickNow)
		return false
	}
	return true
}

// completeNow reports whether, after a refresh from the dead letters,
// every prompt of the run is completed or failed and none waits on the
// workers' consumer.
func (a *Aggregator) completeNow(ctx context.Context) bool {
	if err := a.refresh(ctx); err != nil {
		a.log.Warn("cannot compare failed.jsonl with the dead letters; the run is not declared done yet", "err", err)
		time.AfterFunc(doneSettle, a.kickNow)
		return false
	}
	a.mu.Lock()
	accounted := a.completions.count() + a.failed.count()
	a.mu.Unlock()
	if accounted < a.total {
		return false
	}
	queued, err := a.queued(ctx)
	if err != nil {
		a.log.Warn("cannot read the workers' consumer; the run is not declared done yet", "err", err)
		time.AfterFunc(doneSettle, a.kickNow)
		return false
	}
	if queued > 0 {
		a.log.Info("every prompt has an outcome, but prompts are queued again (a replay or reconcile): waiting for them", "queued", queued)
		return false
	}
	return true
}

// allCompleted reports whether every unit of the run has a completion.
func (a *Aggregator) allCompleted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.completions.count() >= a.total
}

// queued is the number of the run's prompts waiting to be delivered.
func (a *Aggregator) queued(ctx context.Context) (uint64, error) {
	info, err := a.consumerInfo(ctx, schema.PromptsStream, schema.WorkersConsumer(a.cfg.Run))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return info.NumPending, nil
}

// consumerInfo reads the state of a consumer of the run, waiting at most
// 10 s for the server.
func (a *Aggregator) consumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := a.js.Consumer(ctx, stream, name)
	if err != nil {
		return nil, err
	}
	return c.CachedInfo(), nil
}

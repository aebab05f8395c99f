package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// Done returns the aggregator's last event of run when the run is done,
// and nil while it is not. A run is done when its aggregator has said so
// (its last throughput event, kept in the events stream, is of phase
// done: every unit has its line in completions.jsonl or failed.jsonl)
// and its workers' consumer has nothing left, no prompt to deliver and
// none delivered and unsettled; the second half keeps a replay after the
// end from looking done until its prompts are answered. It needs to read
// the events stream and the consumer's info, which the worker, aggregator
// and admin keys may.
func Done(ctx context.Context, js jetstream.JetStream, run string) (*schema.Throughput, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, schema.PromptsStream, schema.WorkersConsumer(run))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil // not produced yet
	}
	if err != nil {
		return nil, fmt.Errorf("read the workers consumer of run %s: %w", run, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the workers consumer of run %s: %w", run, err)
	}
	if info.NumPending > 0 || info.NumAckPending > 0 {
		return nil, nil
	}
	events, err := js.Stream(ctx, schema.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("read the events of run %s: %w", run, err)
	}
	m, err := events.GetLastMsgForSubject(ctx, schema.ThroughputSubject(run))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil // no aggregator has reported yet
	}
	if err != nil {
		return nil, fmt.Errorf("read the events of run %s: %w", run, err)
	}
	var ev schema.Throughput
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return nil, fmt.Errorf("read the last event of run %s: %w", run, err)
	}
	if ev.Phase != schema.PhaseDone {
		return nil, nil
	}
	return &ev, nil
}

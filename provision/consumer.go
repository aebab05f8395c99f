package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// WorkersConsumer returns the run's durable pull consumer on the prompts
// stream, shared by every worker, creating it if missing.
func WorkersConsumer(ctx context.Context, js jetstream.JetStream, run string, opts Options) (jetstream.Consumer, error) {
	opts = opts.withDefaults()
	return ensureConsumer(ctx, js, schema.PromptsStream, jetstream.ConsumerConfig{
		Durable:       schema.WorkersConsumer(run),
		Description:   "aerie workers of run " + run,
		FilterSubject: schema.RunFilter(schema.PromptsRoot, run),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       opts.AckWait,
		MaxDeliver:    opts.MaxDeliver,
		MaxAckPending: opts.MaxAckPending,
		// Pull requests from up to a few hundred workers, each with one
		// outstanding request at a time.
		MaxWaiting: 512,
	})
}

// AggregatorAckWait is the AckWait of the aggregator's consumers. Writing
// and fsyncing a batch takes milliseconds, so this only bounds how long a
// restarted aggregator waits for the batch its crashed predecessor held;
// a late ack merely causes a redelivery, which is skipped by id.
const AggregatorAckWait = 15 * time.Second

// ResultsConsumer returns the aggregator's durable consumer on the results
// of run, creating it if missing.
func ResultsConsumer(ctx context.Context, js jetstream.JetStream, run string) (jetstream.Consumer, error) {
	return ensureConsumer(ctx, js, schema.ResultsStream, jetstream.ConsumerConfig{
		Durable:       schema.ResultsConsumer(run),
		Description:   "aerie aggregator of run " + run,
		FilterSubject: schema.RunFilter(schema.ResultsRoot, run),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       AggregatorAckWait,
		MaxAckPending: 4096,
	})
}

// DeadConsumer returns the aggregator's durable consumer on the dead
// letters of run, creating it if missing.
func DeadConsumer(ctx context.Context, js jetstream.JetStream, run string) (jetstream.Consumer, error) {
	return ensureConsumer(ctx, js, schema.DeadStream, jetstream.ConsumerConfig{
		Durable:       schema.DeadConsumer(run),
		Description:   "aerie aggregator (dead letters) of run " + run,
		FilterSubject: schema.RunFilter(schema.DeadRoot, run),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       AggregatorAckWait,
		MaxAckPending: 4096,
	})
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, stream, cfg.Durable)
	if err == nil {
		return c, nil
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("stream %s does not exist: run `aerie produce` (it creates aerie's streams) and start again: %w", stream, err)
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("look up consumer %s on stream %s: %w", cfg.Durable, stream, err)
	}
	c, err = js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		if c, err2 := js.Consumer(ctx, stream, cfg.Durable); err2 == nil {
			return c, nil // created concurrently by another process
		}
		return nil, fmt.Errorf("create consumer %s on stream %s: %w", cfg.Durable, stream, err)
	}
	return c, nil
}

// AdvisoriesConsumer returns the aggregator's durable consumer on the
// max-deliveries advisories of run's prompts, creating it if missing.
func AdvisoriesConsumer(ctx context.Context, js jetstream.JetStream, run string) (jetstream.Consumer, error) {
	return ensureConsumer(ctx, js, schema.AdvisoriesStream, jetstream.ConsumerConfig{
		Durable:       schema.AdvisoriesConsumer(run),
		Description:   "aerie aggregator (max-deliveries advisories) of run " + run,
		FilterSubject: schema.MaxDeliveriesSubject(run),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       AggregatorAckWait,
	})
}

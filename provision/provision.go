// Package provision creates aerie's JetStream streams, consumers and KV
// bucket, all in one place, so that every role agrees on their settings.
//
// Everything here is create-if-missing: a stream or consumer that already
// exists is used as it is, so an operator who tunes one with the `nats` CLI
// (say, `nats consumer edit` to raise MaxAckPending) is not overridden by
// the next worker that starts.
package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// Defaults for Options.
const (
	// DefaultAckWait is how long a delivered prompt may go without an ack or
	// a progress ack before JetStream hands it to another worker. Workers
	// send progress acks every AckWait/3, so this only bounds how long the
	// prompts of a crashed worker wait before someone else takes them.
	DefaultAckWait = 60 * time.Second
	// DefaultMaxDeliver bounds deliveries per prompt. Failures that are the
	// prompt's own are limited by the run's Policy.MaxAttempts, counted in
	// the attempts bucket; deliveries also count prompts handed back while
	// a backend was down and those held by workers that crashed, so this is
	// the guard against a prompt that kills every worker it reaches.
	DefaultMaxDeliver = 20
	// DefaultMaxAckPending is the consumer-wide cap on prompts delivered and
	// not yet acknowledged. Each worker enforces its own window and holds
	// up to twice it (a prompt generating and one being stored per slot);
	// this cap must be at least workers x window, better twice that, plus
	// prompts parked by delayed NAKs: 20,000 allows 50 workers with the
	// default window of 200 holding all they may.
	DefaultMaxAckPending = 20000
	// DefaultEventsMaxAge is how long the events stream keeps events.
	DefaultEventsMaxAge = 7 * 24 * time.Hour
)

// Options tune the resources. The zero value gives single-replica streams
// and the defaults above.
type Options struct {
	// Replicas for every stream and the runs bucket; zero means 1. Use 3 on
	// a three-node cluster.
	Replicas      int
	AckWait       time.Duration
	MaxDeliver    int
	MaxAckPending int
	// Logger receives the warning that an existing stream could not be
	// changed to take atomic batches; nil means slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.AckWait == 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	if o.MaxAckPending == 0 {
		o.MaxAckPending = DefaultMaxAckPending
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// oncePerSubject is the shape of the prompts, results and dead streams:
// limits retention, one message per subject, forever, and a second publish
// to a subject is refused rather than replacing the first. That makes
// queuing a prompt, storing its answer and dead-lettering it idempotent
// without relying on the (in-memory, two-minute) de-duplication window.
func oncePerSubject(name, root, description string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 name,
		Description:          description,
		Subjects:             []string{root + ".>"},
		Retention:            jetstream.LimitsPolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             replicas,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		AllowDirect:          true,
		// Workers and producers store in atomic batches, which a server
		// with sync_interval always writes with one fsync per batch.
		AllowAtomicPublish: true,
	}
}

// Streams creates any of aerie's streams and KV buckets that do not exist
// yet.
func Streams(ctx context.Context, js jetstream.JetStream, opts Options) error {
	opts = opts.withDefaults()
	return explainReplicas(streams(ctx, js, opts), opts.Replicas)
}

// errReplicasNotClustered is JetStream's error code for streams of more
// than one replica on a server that is not part of a cluster.
const errReplicasNotClustered = 10074

// explainReplicas turns the server's refusal of replicated streams on a
// lone server into what to do about it; other errors pass unchanged.
func explainReplicas(err error, replicas int) error {
	var api *jetstream.APIError
	if err == nil || !errors.As(err, &api) || api.ErrorCode != errReplicasNotClustered {
		return err
	}
	return fmt.Errorf("%w: streams of %d replicas need a NATS cluster, and this server runs alone; drop --replicas (one replica is the only choice on a single server)", err, replicas)
}

func streams(ctx context.Context, js jetstream.JetStream, opts Options) error {
	configs := []jetstream.StreamConfig{
		oncePerSubject(schema.PromptsStream, schema.PromptsRoot, "aerie prompts, one per subject aerie.prompts.<run>.<id digest>", opts.Replicas),
		oncePerSubject(schema.ResultsStream, schema.ResultsRoot, "aerie results, one per prompt", opts.Replicas),
		oncePerSubject(schema.DeadStream, schema.DeadRoot, "aerie dead letters, one per failed prompt", opts.Replicas),
		turnsStream(opts.Replicas),
		{
			Name:        schema.EventsStream,
			Description: "aerie throughput events and worker heartbeats (JSON)",
			Subjects:    []string{schema.EventsRoot + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    opts.Replicas,
			MaxAge:      DefaultEventsMaxAge,
			MaxBytes:    DefaultEventsMaxBytes, // or less on a small store: createEvents
			Discard:     jetstream.DiscardOld,
		},
		{
			Name:        schema.AdvisoriesStream,
			Description: "JetStream max-deliveries advisories of aerie's prompts",
			Subjects:    []string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + schema.PromptsStream + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    opts.Replicas,
			MaxAge:      DefaultEventsMaxAge,
			Discard:     jetstream.DiscardOld,
		},
	}
	for _, cfg := range configs {
		ensure := ensureStream
		if cfg.Name == schema.EventsStream {
			ensure = func(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
				return createEvents(ctx, js, cfg, opts.Logger)
			}
		}
		if err := ensure(ctx, js, cfg); err != nil {
			return err
		}
		if cfg.AllowAtomicPublish {
			allowAtomic(ctx, js, cfg.Name, opts.Logger)
		}
	}
	if _, err := RunsBucket(ctx, js, opts); err != nil {
		return err
	}
	if _, err := LeasesBucket(ctx, js, opts); err != nil {
		return err
	}
	_, err := AttemptsBucket(ctx, js, opts)
	return err
}

// turnsStream is the shape of the turns stream: once per subject, like
// the results it leads to.
func turnsStream(replicas int) jetstream.StreamConfig {
	return oncePerSubject(schema.TurnsStream, schema.TurnsRoot, "aerie finished turns of conversations generated with --turns all, kept until the conversation's result is stored", replicas)
}

// TurnsStream opens the turns stream, creating it if needed (a
// deployment whose streams predate it gets it from the first worker of a
// --turns all run).
func TurnsStream(ctx context.Context, js jetstream.JetStream, opts Options) (jetstream.Stream, error) {
	opts = opts.withDefaults()
	if err := ensureStream(ctx, js, turnsStream(opts.Replicas)); err != nil {
		return nil, err
	}
	return js.Stream(ctx, schema.TurnsStream)
}

// LeaseTTL is how long a lease in the leases bucket lives without being
// renewed. Its holder renews it every third of that, so a holder that
// dies (kill -9, a lost host) frees it within LeaseTTL, and a NATS
// outage shorter than about two thirds of it costs nothing.
const LeaseTTL = 30 * time.Second

// LeasesBucket opens the KV bucket of leases, creating it if needed.
// Its entries expire LeaseTTL after they were last written.
func LeasesBucket(ctx context.Context, js jetstream.JetStream, opts Options) (jetstream.KeyValue, error) {
	opts = opts.withDefaults()
	return ensureBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      schema.LeasesBucket,
		Description: "aerie leases: which aggregator writes each run's output",
		History:     1,
		TTL:         LeaseTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
	})
}

// Replicas is the replica count of the runs bucket, which the first
// `aerie produce` created with the deployment's choice: what a role
// creating a resource later (an aggregator after an upgrade, say) should
// use. It is 1 when the bucket cannot be read.
func Replicas(ctx context.Context, js jetstream.JetStream) int {
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		return 1
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return 1
	}
	if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && s.StreamInfo().Config.Replicas > 0 {
		return s.StreamInfo().Config.Replicas
	}
	return 1
}

// AttemptsTTL is how long a prompt's failure count is kept: far longer
// than any run, short enough that the bucket does not grow forever.
const AttemptsTTL = 30 * 24 * time.Hour

// AttemptsBucket opens the KV bucket of per-prompt failure counts,
// creating it if needed.
func AttemptsBucket(ctx context.Context, js jetstream.JetStream, opts Options) (jetstream.KeyValue, error) {
	opts = opts.withDefaults()
	return ensureBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      schema.AttemptsBucket,
		Description: "aerie failures per prompt that count against its attempts",
		History:     1,
		TTL:         AttemptsTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
	})
}

func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open KV bucket %s: %w", cfg.Bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if err != nil {
		if kv, err2 := js.KeyValue(ctx, cfg.Bucket); err2 == nil {
			return kv, nil // created concurrently by another process
		}
		return nil, fmt.Errorf("create KV bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	_, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("look up stream %s: %w", cfg.Name, err)
	}
	_, err = js.CreateStream(ctx, cfg)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("create stream %s: %w", cfg.Name, err)
	}
	return nil
}

// RunsBucket opens the KV bucket of run manifests, creating it if needed.
func RunsBucket(ctx context.Context, js jetstream.JetStream, opts Options) (jetstream.KeyValue, error) {
	opts = opts.withDefaults()
	return ensureBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      schema.RunsBucket,
		Description: "aerie run manifests: model, sampling parameters, prompt count",
		History:     5,
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
	})
}

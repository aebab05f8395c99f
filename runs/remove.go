package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/jsrequest"
	"github.com/aerie-dev/aerie/schema"
)

// RemoveOptions tune Remove. The zero value uses the default request
// options and refuses to remove a run that looks alive.
type RemoveOptions struct {
	Options
	// Force removes the run even while it looks alive (Removal.Alive).
	Force bool
}

// AliveError is Remove's refusal to remove a run that is being worked on.
type AliveError struct {
	Run string
	// Reasons say why the run looks alive (Removal.Alive).
	Reasons []string
}

func (e *AliveError) Error() string {
	return fmt.Sprintf("run %s looks alive: %s; nothing was removed: stop its workers and aggregator first, or add --force",
		e.Run, strings.Join(e.Reasons, "; "))
}

// Remove removes everything run has on the server, as Plan finds it:
// its consumers first, so that nothing is delivered from what is being
// removed, then its messages in every stream, its failure counts, its
// aggregator lease and, last, its manifest, so that a removal that stops
// half way still lists the run and can be run again. It refuses, with an
// *AliveError, while the run looks alive, unless opts.Force is set. It
// returns what it found and removed.
func Remove(ctx context.Context, js jetstream.JetStream, run string, opts RemoveOptions) (*Removal, error) {
	if err := schema.ValidateRun(run); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.WithDefaults()
	r, err := plan(ctx, js, run, o)
	if err != nil {
		return nil, err
	}
	if why := r.Alive(); len(why) > 0 && !opts.Force {
		return r, &AliveError{Run: run, Reasons: why}
	}
	for _, step := range []func(context.Context, jetstream.JetStream, Options, *Removal) error{
		deleteConsumers, purgeMessages, purgeAttempts, purgeLease, purgeManifest,
	} {
		if err := step(ctx, js, o, r); err != nil {
			return r, fmt.Errorf("remove run %s: %w (what was removed before stays removed; run the removal again to finish it)", run, err)
		}
	}
	return r, nil
}

func deleteConsumers(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	for _, c := range r.Consumers {
		err := request(ctx, opts, "delete consumer "+c.Name+" of stream "+c.Stream, func(ctx context.Context) error {
			err := js.DeleteConsumer(ctx, c.Stream, c.Name)
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func purgeMessages(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	for _, m := range r.Messages {
		if err := purge(ctx, js, opts, m.Stream, m.Filter); err != nil {
			return err
		}
	}
	return nil
}

// purge removes every message on filter from stream.
func purge(ctx context.Context, js jetstream.JetStream, opts Options, stream, filter string) error {
	return request(ctx, opts, "purge "+filter+" from stream "+stream, func(ctx context.Context) error {
		s, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return s.Purge(ctx, jetstream.WithPurgeSubject(filter))
	})
}

// purgeAttempts removes the run's failure counts from the stream behind
// the attempts bucket, all in one request and without leaving a delete
// marker per key.
func purgeAttempts(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	kv, err := jsrequest.Bucket(ctx, js, opts, schema.AttemptsBucket)
	if err != nil || kv == nil {
		return err
	}
	stream, filter, err := kvSubjects(ctx, kv, opts, attemptsPattern(r.Run))
	if err != nil {
		return err
	}
	return purge(ctx, js, opts, stream, filter)
}

func purgeLease(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	if r.Lease == nil {
		return nil
	}
	return purgeKey(ctx, js, opts, r.Lease.Bucket, r.Lease.Key)
}

func purgeManifest(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	for _, k := range r.Keys {
		if k.Bucket == schema.RunsBucket {
			return purgeKey(ctx, js, opts, schema.RunsBucket, r.Run)
		}
	}
	return nil // no manifest: leave no delete marker for a name never produced
}

// purgeKey deletes key and its history from bucket, if both exist.
func purgeKey(ctx context.Context, js jetstream.JetStream, opts Options, bucket, key string) error {
	kv, err := jsrequest.Bucket(ctx, js, opts, bucket)
	if err != nil || kv == nil {
		return err
	}
	return request(ctx, opts, "purge key "+key+" of KV bucket "+bucket, func(ctx context.Context) error {
		return kv.Purge(ctx, key)
	})
}

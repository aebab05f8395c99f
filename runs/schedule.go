package runs

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/jsrequest"
	"github.com/aerie-dev/aerie/schema"
)

// ScheduleChange is a change to a run's schedule; nil fields are left
// as they are.
type ScheduleChange struct {
	Priority *int
	Weight   *float64
	Paused   *bool
}

// Empty reports whether the change changes nothing.
func (c ScheduleChange) Empty() bool { return c.Priority == nil && c.Weight == nil && c.Paused == nil }

// Validate reports a weight that is not positive.
func (c ScheduleChange) Validate() error {
	if c.Weight != nil && !(*c.Weight > 0) {
		return fmt.Errorf("weight %v: a run's weight must be above 0 (1 is the default; a run that should get nothing is paused)", *c.Weight)
	}
	return nil
}

// apply returns s with the change made.
func (c ScheduleChange) apply(s schema.Schedule) schema.Schedule {
	if c.Priority != nil {
		s.Priority = *c.Priority
	}
	if c.Weight != nil {
		s.Weight = *c.Weight
	}
	if c.Paused != nil {
		s.Paused = *c.Paused
	}
	return s
}

// SetSchedule changes run's schedule in its manifest, the only part of a
// manifest that may change, and returns the schedule before and after.
// Workers serving the run follow its manifest and apply the change at
// once. The update is conditional on the revision read, and retried when
// another change came first, so that two changes at once both hold.
func SetSchedule(ctx context.Context, js jetstream.JetStream, run string, c ScheduleChange, opts Options) (was, now schema.Schedule, err error) {
	if err := c.Validate(); err != nil {
		return was, now, err
	}
	opts = opts.WithDefaults()
	kv, err := jsrequest.Bucket(ctx, js, opts, schema.RunsBucket)
	if err != nil {
		return was, now, err
	}
	notFound := fmt.Errorf("run %s has no manifest on this server: check the name (aerie runs ls) and --nats", run)
	if kv == nil {
		return was, now, notFound
	}
	for range 10 {
		var e jetstream.KeyValueEntry
		err := request(ctx, opts, "read the manifest of run "+run, func(ctx context.Context) error {
			var err error
			e, err = kv.Get(ctx, run)
			return err
		})
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return was, now, notFound
		}
		if err != nil {
			return was, now, err
		}
		m, err := schema.DecodeManifest(e.Value())
		if err != nil {
			return was, now, fmt.Errorf("run %s: its manifest cannot be read: %w", run, err)
		}
		was = m.Schedule
		m.Schedule = c.apply(m.Schedule)
		now = m.Schedule
		if now == was {
			return was, now, nil
		}
		b, err := schema.EncodeManifest(m)
		if err != nil {
			return was, now, err
		}
		uctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		_, err = kv.Update(uctx, run, b, e.Revision())
		cancel()
		if err == nil {
			return was, now, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return was, now, fmt.Errorf("store the schedule of run %s in KV bucket %s: %w", run, schema.RunsBucket, err)
		}
		// Another change came first: read it and apply ours on top.
	}
	return was, now, fmt.Errorf("store the schedule of run %s: the manifest kept changing under us; try again", run)
}

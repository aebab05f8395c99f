package requeue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// Requeuer puts the units (prompt and sample) of one run back to work. It looks up the
// streams and the run manifest once, so one Requeuer serves a whole replay
// or reconcile. It may be used by several goroutines at once.
type Requeuer struct {
	js       jetstream.JetStream
	run      string
	opts     Options
	manifest *schema.Manifest

	prompts, results, dead jetstream.Stream
}

// New returns a Requeuer for run. It fails when the run has no manifest
// (it was never produced on this server: a wrong --run or --nats), when
// the run needs a feature this build lacks (a *schema.LackError: it
// would queue prompts it does not understand), or when one of aerie's
// streams is missing.
func New(ctx context.Context, js jetstream.JetStream, run string, opts Options) (*Requeuer, error) {
	if err := schema.ValidateRun(run); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &Requeuer{js: js, run: run, opts: opts.WithDefaults()}
	var err error
	if r.manifest, err = r.readManifest(ctx); err != nil {
		return nil, err
	}
	if err := schema.CheckNeeds("run "+run, r.manifest.Needs, r.manifest.WrittenBy); err != nil {
		return nil, err
	}
	for _, s := range []struct {
		name string
		dst  *jetstream.Stream
	}{{schema.PromptsStream, &r.prompts}, {schema.ResultsStream, &r.results}, {schema.DeadStream, &r.dead}} {
		err := request(ctx, r.opts, "look up stream "+s.name, func(ctx context.Context) error {
			var err error
			*s.dst, err = js.Stream(ctx, s.name)
			return err
		})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("stream %s does not exist on this server although run %s has a manifest: was it deleted? `aerie produce` creates it again", s.name, run)
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *Requeuer) readManifest(ctx context.Context) (*schema.Manifest, error) {
	var m *schema.Manifest
	err := request(ctx, r.opts, "read the manifest of run "+r.run, func(ctx context.Context) error {
		kv, err := r.js.KeyValue(ctx, schema.RunsBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, r.run)
		if err != nil {
			return err
		}
		m, err = schema.DecodeManifest(e.Value())
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("run %s has no manifest in bucket %s on this server: check --run and --nats (`aerie produce` creates the run)", r.run, schema.RunsBucket)
	}
	return m, err
}

// Run is the run this Requeuer serves.
func (r *Requeuer) Run() string { return r.run }

// Manifest is the run's manifest as read by New.
func (r *Requeuer) Manifest() *schema.Manifest { return r.manifest }

// Workers returns the state of the run's workers consumer, or nil when
// the consumer does not exist yet: then no prompt has been delivered.
func (r *Requeuer) Workers(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	var info *jetstream.ConsumerInfo
	name := schema.WorkersConsumer(r.run)
	err := request(ctx, r.opts, "read consumer "+name+" of stream "+schema.PromptsStream, func(ctx context.Context) error {
		c, err := r.prompts.Consumer(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			info = nil
			return nil
		case err != nil:
			return err
		}
		info = c.CachedInfo()
		return nil
	})
	return info, err
}

// last returns the message stored on subject, or nil when there is none.
func (r *Requeuer) last(ctx context.Context, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := request(ctx, r.opts, "read "+subject+" from stream "+s.CachedInfo().Config.Name, func(ctx context.Context) error {
		var err error
		m, err = s.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			m = nil
			return nil
		}
		return err
	})
	return m, err
}

// HasResult reports whether the results stream holds an answer to the
// unit: then it is done, or waits only for the aggregator.
func (r *Requeuer) HasResult(ctx context.Context, u schema.Unit) (bool, error) {
	m, err := r.last(ctx, r.results, schema.ResultSubject(r.run, u))
	return m != nil, err
}

// resultKind says what the results stream holds for a prompt.
type resultKind int

const (
	noResult resultKind = iota
	readableResult
	// unreadableResult: stored, but it cannot be decoded; the aggregator
	// dead-letters such a result as poison.
	unreadableResult
)

// resultOf tells what the results stream holds for unit u.
func (r *Requeuer) resultOf(ctx context.Context, u schema.Unit) (resultKind, error) {
	m, err := r.last(ctx, r.results, schema.ResultSubject(r.run, u))
	switch {
	case err != nil:
		return noResult, err
	case m == nil:
		return noResult, nil
	}
	if schema.CheckSchemaHeader(schema.KindResult, m.Header.Get(schema.HeaderSchema)) != nil {
		return unreadableResult, nil
	}
	if _, err := schema.DecodeResult(m.Data); err != nil {
		return unreadableResult, nil
	}
	return readableResult, nil
}

// dropResult removes the result stored for unit u.
func (r *Requeuer) dropResult(ctx context.Context, u schema.Unit) error {
	m, err := r.last(ctx, r.results, schema.ResultSubject(r.run, u))
	if err != nil || m == nil {
		return err
	}
	return r.purge(ctx, r.results, m)
}

// listTimeout bounds the listing of a run's subjects on a stream: the
// server pages it, and a run of a million prompts takes a few seconds.
const listTimeout = 2 * time.Minute

// storedTokens returns the subject tokens of the run's messages on s,
// whose subjects are <root>.<run>.<token>: one listing of the subjects
// instead of a look-up per unit.
func (r *Requeuer) storedTokens(ctx context.Context, s jetstream.Stream, root string) (idSet, error) {
	filter := schema.RunFilter(root, r.run)
	var subjects map[string]uint64
	o := r.opts
	o.Timeout = max(o.Timeout, listTimeout)
	err := request(ctx, o, "list the subjects "+filter+" of stream "+s.CachedInfo().Config.Name, func(ctx context.Context) error {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err == nil {
			subjects = info.State.Subjects
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	prefix := root + "." + r.run + "."
	tokens := make(idSet, len(subjects))
	for subject := range subjects {
		tokens[strings.TrimPrefix(subject, prefix)] = struct{}{}
	}
	return tokens, nil
}

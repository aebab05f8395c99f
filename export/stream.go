package export

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// Streams is the Source of a run's results and dead letters as JetStream
// keeps them (AERIE_RESULTS and AERIE_DEAD): for a run whose
// completions.jsonl was lost or edited. It builds the same lines the
// aggregator writes. A stored result or dead letter that cannot be
// decoded is left out and counted in Undecodable.
type Streams struct {
	JS  jetstream.JetStream
	Run string
	// Undecodable counts the messages left out.
	Undecodable int
}

// Completions reads the run's results, each as the line the aggregator
// would write for it.
func (s *Streams) Completions(ctx context.Context, fn func([]byte) error) error {
	return s.read(ctx, schema.ResultsStream, schema.ResultsRoot, func(m jetstream.Msg) error {
		if schema.CheckSchemaHeader(schema.KindResult, m.Headers().Get(schema.HeaderSchema)) != nil {
			s.Undecodable++
			return nil
		}
		if err := schema.CheckHeader("a result of run "+s.Run, m.Headers()); err != nil {
			return err
		}
		r, err := schema.DecodeResult(m.Data())
		if err != nil {
			s.Undecodable++
			return nil
		}
		l := dataset.NewCompletionLine(r)
		line, err := json.Marshal(&l)
		if err != nil {
			return fmt.Errorf("result %s: %w", r.ID, err)
		}
		return fn(line)
	})
}

// Failed reads the run's dead letters. One without a prompt id (its
// prompt could not be decoded) is named after its subject, as in
// failed.jsonl.
func (s *Streams) Failed(ctx context.Context, fn func(*dataset.FailedLine) error) error {
	return s.read(ctx, schema.DeadStream, schema.DeadRoot, func(m jetstream.Msg) error {
		if schema.CheckSchemaHeader(schema.KindDeadLetter, m.Headers().Get(schema.HeaderSchema)) != nil {
			s.Undecodable++
			return nil
		}
		d, err := schema.DecodeDeadLetter(m.Data())
		if err != nil {
			s.Undecodable++
			return nil
		}
		if d.ID == "" {
			d.ID = "subject:" + m.Subject()
		}
		l := dataset.NewFailedLine(d)
		return fn(&l)
	})
}

// read walks the run's messages of stream with an ordered consumer,
// which needs no durable state and no acks, up to the last one stored
// when it started.
func (s *Streams) read(ctx context.Context, stream, root string, fn func(jetstream.Msg) error) error {
	filter := schema.RunFilter(root, s.Run)
	st, err := s.JS.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("read stream %s: %w (is --nats the run's server?)", stream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream, err)
	}
	if len(info.State.Subjects) == 0 {
		return nil
	}
	cons, err := s.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read stream %s: %w", stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read stream %s: %w", stream, err)
		}
		if err := fn(m); err != nil {
			return err
		}
		if meta.NumPending == 0 {
			return nil
		}
	}
}

// Manifest reads the run's manifest from its bucket.
func (s *Streams) Manifest(ctx context.Context) (*schema.Manifest, error) {
	kv, err := s.JS.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, s.Run)
	if err != nil {
		return nil, err
	}
	return schema.DecodeManifest(e.Value())
}

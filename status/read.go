package status

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/jsrequest"
)

// reader makes the read requests of one status, each bounded and
// repeated through jsrequest. A stream, bucket, key, consumer or message
// that does not exist is nil, not an error: a run that has just been
// produced has no events yet.
type reader struct {
	js   jetstream.JetStream
	opts jsrequest.Options
}

func (r reader) do(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	return jsrequest.Do(ctx, r.opts, what, fn)
}

func (r reader) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := r.do(ctx, "look up stream "+name, func(ctx context.Context) error {
		var err error
		if s, err = r.js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			s, err = nil, nil
		}
		return err
	})
	return s, err
}

func (r reader) key(ctx context.Context, bucket, key string) (jetstream.KeyValueEntry, error) {
	var e jetstream.KeyValueEntry
	err := r.do(ctx, "read key "+key+" of KV bucket "+bucket, func(ctx context.Context) error {
		kv, err := r.js.KeyValue(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			e = nil
			return nil
		}
		if err != nil {
			return err
		}
		if e, err = kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
			e, err = nil, nil
		}
		return err
	})
	return e, err
}

func (r reader) consumer(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	var info *jetstream.ConsumerInfo
	err := r.do(ctx, "read consumer "+name+" of stream "+stream, func(ctx context.Context) error {
		c, err := r.js.Consumer(ctx, stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			info = nil
			return nil
		}
		if err != nil {
			return err
		}
		info, err = c.Info(ctx)
		return err
	})
	return info, err
}

func (r reader) lastMsg(ctx context.Context, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := r.do(ctx, "read the last message on "+subject, func(ctx context.Context) error {
		var err error
		if m, err = s.GetLastMsgForSubject(ctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
			m, err = nil, nil
		}
		return err
	})
	return m, err
}

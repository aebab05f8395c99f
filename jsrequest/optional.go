package jsrequest

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// The lookups below read something that may rightly not exist yet (a run
// just produced has no events, a finished one may have been removed):
// absence is a nil result, not an error. Each is made through Do.

// Stream returns the stream called name, or nil when the server has no
// such stream.
func Stream(ctx context.Context, js jetstream.JetStream, o Options, name string) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := Do(ctx, o, "look up stream "+name, func(ctx context.Context) error {
		var err error
		if s, err = js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			s, err = nil, nil
		}
		return err
	})
	return s, err
}

// Bucket returns the KV bucket called name, or nil when the server has
// no such bucket.
func Bucket(ctx context.Context, js jetstream.JetStream, o Options, name string) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := Do(ctx, o, "open KV bucket "+name, func(ctx context.Context) error {
		var err error
		if kv, err = js.KeyValue(ctx, name); errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = nil, nil
		}
		return err
	})
	return kv, err
}

// Key returns the current entry of key in kv, or nil when the key does
// not exist or was deleted.
func Key(ctx context.Context, kv jetstream.KeyValue, o Options, key string) (jetstream.KeyValueEntry, error) {
	var e jetstream.KeyValueEntry
	err := Do(ctx, o, "read key "+key+" of KV bucket "+kv.Bucket(), func(ctx context.Context) error {
		var err error
		if e, err = kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
			e, err = nil, nil
		}
		return err
	})
	return e, err
}

// LastMsg returns the last message stored on subject, which may hold
// wildcards, or nil when there is none.
func LastMsg(ctx context.Context, s jetstream.Stream, o Options, subject string) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := Do(ctx, o, "read the last message on "+subject+" from stream "+s.CachedInfo().Config.Name, func(ctx context.Context) error {
		var err error
		if m, err = s.GetLastMsgForSubject(ctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
			m, err = nil, nil
		}
		return err
	})
	return m, err
}

// ConsumerInfo returns the state of consumer name on stream, or nil when
// the stream or the consumer does not exist.
func ConsumerInfo(ctx context.Context, js jetstream.JetStream, o Options, stream, name string) (*jetstream.ConsumerInfo, error) {
	var info *jetstream.ConsumerInfo
	err := Do(ctx, o, "read consumer "+name+" of stream "+stream, func(ctx context.Context) error {
		info = nil
		c, err := js.Consumer(ctx, stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
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

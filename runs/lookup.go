package runs

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// optionalStream returns the stream called name, or nil when the server
// has no such stream.
func optionalStream(ctx context.Context, js jetstream.JetStream, opts Options, name string) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := request(ctx, opts, "look up stream "+name, func(ctx context.Context) error {
		var err error
		s, err = js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			s = nil
			return nil
		}
		return err
	})
	return s, err
}

// optionalBucket returns the KV bucket called name, or nil when the
// server has no such bucket.
func optionalBucket(ctx context.Context, js jetstream.JetStream, opts Options, name string) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := request(ctx, opts, "open KV bucket "+name, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv = nil
			return nil
		}
		return err
	})
	return kv, err
}

// lastMsg returns the last message stored on subject, which may hold
// wildcards, or nil when there is none.
func lastMsg(ctx context.Context, s jetstream.Stream, opts Options, subject string) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := request(ctx, opts, "read the last message on "+subject+" from stream "+s.CachedInfo().Config.Name, func(ctx context.Context) error {
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

// optionalKey returns the current entry of key in kv, or nil when the key
// does not exist or was deleted.
func optionalKey(ctx context.Context, kv jetstream.KeyValue, opts Options, key string) (jetstream.KeyValueEntry, error) {
	var e jetstream.KeyValueEntry
	err := request(ctx, opts, "read key "+key+" of KV bucket "+kv.Bucket(), func(ctx context.Context) error {
		var err error
		e, err = kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			e = nil
			return nil
		}
		return err
	})
	return e, err
}

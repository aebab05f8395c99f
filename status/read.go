package status

import (
	"context"

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
	return jsrequest.Stream(ctx, r.js, r.opts, name)
}

func (r reader) key(ctx context.Context, bucket, key string) (jetstream.KeyValueEntry, error) {
	kv, err := jsrequest.Bucket(ctx, r.js, r.opts, bucket)
	if err != nil || kv == nil {
		return nil, err
	}
	return jsrequest.Key(ctx, kv, r.opts, key)
}

func (r reader) consumer(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	return jsrequest.ConsumerInfo(ctx, r.js, r.opts, stream, name)
}

func (r reader) lastMsg(ctx context.Context, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	return jsrequest.LastMsg(ctx, s, r.opts, subject)
}

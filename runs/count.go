package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// countConsumerIdle is how long the server keeps a counting consumer that
// was not deleted (the deletion failed, or the process died): long enough
// to read its info, short enough not to linger.
const countConsumerIdle = time.Minute

// countMessages counts the messages on filter in stream. The server does
// the counting when it creates a consumer (its NumPending), in one
// request however many messages match: listing the subjects would page
// through one entry per prompt.
func countMessages(ctx context.Context, js jetstream.JetStream, opts Options, stream, filter string) (uint64, error) {
	var n uint64
	err := request(ctx, opts, "count the messages on "+filter+" in stream "+stream, func(ctx context.Context) error {
		c, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Description:       "aerie runs: counts the messages on " + filter,
			FilterSubject:     filter,
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			AckPolicy:         jetstream.AckNonePolicy,
			MemoryStorage:     true,
			InactiveThreshold: countConsumerIdle,
		})
		if err != nil {
			return err
		}
		info := c.CachedInfo()
		n = info.NumPending
		// Best effort: the server removes it after countConsumerIdle anyway.
		_ = js.DeleteConsumer(ctx, stream, info.Name)
		return nil
	})
	return n, err
}

// consumerExists reports whether the durable consumer c exists.
func consumerExists(ctx context.Context, js jetstream.JetStream, opts Options, c Consumer) (bool, error) {
	var exists bool
	err := request(ctx, opts, "look up consumer "+c.Name+" of stream "+c.Stream, func(ctx context.Context) error {
		_, err := js.Consumer(ctx, c.Stream, c.Name)
		switch {
		case err == nil:
			exists = true
			return nil
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			exists = false
			return nil
		}
		return err
	})
	return exists, err
}

// kvSubjects returns the stream behind kv and the subject filter of the
// keys matching keyPattern in it, so that many keys are counted and
// removed in one request each rather than one per key. A bucket is a
// stream whose subjects are a prefix followed by the key (JetStream's
// key-value layout, ADR-8 in nats-io/nats-architecture-and-design); the
// prefix is read from the stream's configuration.
func kvSubjects(ctx context.Context, kv jetstream.KeyValue, opts Options, keyPattern string) (stream, filter string, err error) {
	var st jetstream.KeyValueStatus
	err = request(ctx, opts, "read the status of KV bucket "+kv.Bucket(), func(ctx context.Context) error {
		var err error
		st, err = kv.Status(ctx)
		return err
	})
	if err != nil {
		return "", "", err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || len(bs.StreamInfo().Config.Subjects) != 1 || !strings.HasSuffix(bs.StreamInfo().Config.Subjects[0], ".>") {
		return "", "", fmt.Errorf("KV bucket %s is not laid out as a plain bucket (a mirror or a source?): its keys cannot be selected by subject", kv.Bucket())
	}
	cfg := bs.StreamInfo().Config
	return cfg.Name, strings.TrimSuffix(cfg.Subjects[0], ">") + keyPattern, nil
}

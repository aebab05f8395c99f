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

// WaitManifest returns the manifest of run, waiting for the producer to
// write it if needed: workers and aggregators may start before the
// prompts are queued. It logs once that it is waiting. It never creates
// the runs bucket: the producer does, with the replicas it was given.
func WaitManifest(ctx context.Context, js jetstream.JetStream, run string, log *slog.Logger) (*schema.Manifest, error) {
	var kv jetstream.KeyValue
	for attempt := 1; kv == nil; attempt++ {
		var err error
		kv, err = js.KeyValue(ctx, schema.RunsBucket)
		switch {
		case err == nil:
		case errors.Is(err, jetstream.ErrBucketNotFound):
			if attempt == 1 {
				log.Info("waiting for the first `aerie produce`: KV bucket not created yet", "bucket", schema.RunsBucket)
			}
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		default:
			return nil, fmt.Errorf("open KV bucket %s: %w", schema.RunsBucket, err)
		}
	}
	watcher, err := kv.Watch(ctx, run)
	if err != nil {
		return nil, fmt.Errorf("watch manifest of run %s: %w", run, err)
	}
	defer watcher.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-watcher.Updates():
			if !ok {
				return nil, errors.New("manifest watch ended")
			}
			if e == nil { // all current values delivered: none yet
				log.Info("waiting for the run manifest: run `aerie produce` for this run", "bucket", schema.RunsBucket, "key", run)
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			m, err := schema.DecodeManifest(e.Value())
			if err != nil {
				return nil, fmt.Errorf("manifest of run %s in bucket %s: %w", run, schema.RunsBucket, err)
			}
			return m, nil
		}
	}
}

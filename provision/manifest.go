package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// WaitManifest returns the manifest of run, waiting for the producer to
// write it if needed: workers and aggregators may start before the
// prompts are queued. It logs once that it is waiting.
func WaitManifest(ctx context.Context, js jetstream.JetStream, run string, log *slog.Logger) (*schema.Manifest, error) {
	kv, err := RunsBucket(ctx, js, Options{})
	if err != nil {
		return nil, err
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

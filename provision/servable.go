package provision

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// WaitServable holds a role whose build lacks features m's run needs
// (lack): it calls say at once and every period, so that the role says
// why it takes nothing of the run, and waits for the run's manifest to
// be put again as one this build can serve (a new run of the same name),
// which it returns. Only ctx's end stops it otherwise: the fix is an
// upgrade of the host.
func WaitServable(ctx context.Context, js jetstream.JetStream, m *schema.Manifest, lack *schema.LackError,
	period time.Duration, say func(*schema.LackError), log *slog.Logger) (*schema.Manifest, error) {
	kv, err := WaitRunsBucket(ctx, js, log)
	if err != nil {
		return nil, err
	}
	watcher, err := kv.Watch(ctx, m.Run, jetstream.UpdatesOnly())
	if err != nil {
		return nil, err
	}
	defer func() { _ = watcher.Stop() }()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		say(lack)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		case e, ok := <-watcher.Updates():
			if !ok {
				return nil, errors.New("the watch of the run's manifest ended")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			next, err := schema.DecodeManifest(e.Value())
			if err != nil {
				log.Warn("run manifest cannot be read: run still left alone", "err", err)
				continue
			}
			if l := schema.LackOf(next); l != nil {
				lack = l
				continue
			}
			log.Info("the run's manifest was put again, and this build has every feature it needs: taking the run")
			return next, nil
		}
	}
}

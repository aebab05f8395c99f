package provision

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
)

// allowAtomic turns on atomic batch publish for the stream name, made
// without it by an older aerie, keeping the rest of its configuration as
// it is (an operator's changes included). It is best effort: a server
// that refuses the change still stores every message, one fsync each, so
// the change failing is a warning, not an error.
func allowAtomic(ctx context.Context, js jetstream.JetStream, name string, log *slog.Logger) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		log.Warn("cannot look up stream to allow atomic batch publish; messages are stored one fsync each", "stream", name, "err", err)
		return
	}
	cfg := s.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return
	}
	cfg.AllowAtomicPublish = true
	info, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		log.Warn("cannot allow atomic batch publish on stream made by an older aerie; messages are stored one fsync each",
			"stream", name, "err", err)
		return
	}
	if !info.CachedInfo().Config.AllowAtomicPublish {
		log.Warn("the server does not support atomic batch publish; messages are stored one fsync each (nats-server 2.15.2, aerie's embedded server, does)",
			"stream", name)
		return
	}
	log.Info("stream now takes atomic batches", "stream", name)
}

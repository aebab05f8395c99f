package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// lackOf is why this build cannot serve m's run: the features it needs
// that the build lacks; nil when it has them all.
func lackOf(m *schema.Manifest) *schema.LackError {
	var le *schema.LackError
	if errors.As(schema.CheckNeeds("run "+m.Run, m.Needs, m.WrittenBy), &le) {
		return le
	}
	return nil
}

// waitServable holds a worker of one run (Config.Run) whose run needs
// features this build lacks: it takes none of the run's prompts, says
// why in its log once and in a heartbeat every period, and waits for
// the run's manifest to be put again as one it can serve (a new run of
// the same name), which it returns. Only ctx's end stops it otherwise:
// the fix is an upgrade of this host.
func (w *Worker) waitServable(ctx context.Context, m *schema.Manifest, lack *schema.LackError) (*schema.Manifest, error) {
	w.log.Error("leaving the run alone: it needs features this worker lacks; no prompt of it is taken until this host runs an aerie that has them",
		"lacks", lack.Lacking, "written_by", lack.By, "version", schema.BuildVersion(), "err", lack)
	kv, err := provision.WaitRunsBucket(ctx, w.link.js, w.log)
	if err != nil {
		return nil, err
	}
	watcher, err := kv.Watch(ctx, m.Run, jetstream.UpdatesOnly())
	if err != nil {
		return nil, err
	}
	defer func() { _ = watcher.Stop() }()
	beat := time.NewTicker(w.cfg.Heartbeat)
	defer beat.Stop()
	for {
		w.report.skipped(m.Run, lack.Error(), lack)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-beat.C:
		case e, ok := <-watcher.Updates():
			if !ok {
				return nil, errors.New("the watch of the run's manifest ended")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			next, err := schema.DecodeManifest(e.Value())
			if err != nil {
				w.log.Warn("run manifest cannot be read: run still left alone", "err", err)
				continue
			}
			if l := lackOf(next); l != nil {
				lack = l
				continue
			}
			w.log.Info("the run's manifest was put again, and this worker has every feature it needs: serving it")
			return next, nil
		}
	}
}

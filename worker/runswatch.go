package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// runWatch follows the runs bucket: it opens the lanes of a worker of
// several runs as their manifests appear, skips those it cannot serve,
// and hands every served run's schedule changes and deletion to its
// lane. Its fields are set by New; skipped and models are its own.
type runWatch struct {
	cfg     Config
	link    *link
	log     *slog.Logger
	backend Backend
	runs    *runSet
	report  *reporter
	metrics *metrics
	// follow starts, under ctx, what a lane opened here needs besides
	// pulls: its peers, its hedge notices, the look for its end.
	follow func(ctx context.Context, l *lane)
	// skipped holds a skippedRun by run name for the runs not served, and
	// models the backend's model list.
	skipped sync.Map
	models  modelCache
}

// watch follows the runs bucket until ctx ends. A manifest put for a
// run served changes its schedule (priority, weight, pause); one for a
// run not yet served opens its lane when the worker serves several runs
// (Config.Runs names it, or Config.AllRuns) and its backend serves the
// run's model, and is skipped otherwise, with a heartbeat that says why.
// A deleted manifest stops pulls from its run; what is held finishes.
func (w *runWatch) watch(ctx context.Context, kv jetstream.KeyValue) {
	for attempt := 1; ctx.Err() == nil; attempt++ {
		var watcher jetstream.KeyWatcher
		var err error
		switch {
		case w.cfg.Run != "":
			watcher, err = kv.Watch(ctx, w.cfg.Run)
		case len(w.cfg.Runs) > 0:
			watcher, err = kv.WatchFiltered(ctx, w.cfg.Runs)
		default:
			watcher, err = kv.WatchAll(ctx)
		}
		if err != nil {
			d := retryDelay(attempt, time.Second, 30*time.Second)
			w.log.Warn("cannot follow the runs bucket: runs and their schedule changes are not seen until it works", "err", err, "retry_in", d)
			if !sleep(ctx, d) {
				return
			}
			continue
		}
		w.followRuns(ctx, watcher)
		_ = watcher.Stop()
	}
}

// followRuns handles a watcher's updates until ctx ends or it stops.
func (w *runWatch) followRuns(ctx context.Context, watcher jetstream.KeyWatcher) {
	skipTick := time.NewTicker(skipRecheck)
	defer skipTick.Stop()
	beat := time.NewTicker(w.cfg.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			w.beatLacking()
		case <-skipTick.C:
			w.recheckSkipped(ctx)
		case e, ok := <-watcher.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue // the current manifests are all delivered
			}
			if e.Operation() != jetstream.KeyValuePut {
				w.runGone(e.Key())
				continue
			}
			m, err := schema.DecodeManifest(e.Value())
			if err != nil {
				w.log.Warn("run manifest cannot be read: run skipped", "run", e.Key(), "err", err)
				continue
			}
			w.runPut(ctx, m)
		}
	}
}

// runPut handles a manifest put for m's run.
func (w *runWatch) runPut(ctx context.Context, m *schema.Manifest) {
	if l := w.runs.of(m.Run); l != nil {
		was := l.schedule()
		if was == m.Schedule {
			return
		}
		sc := m.Schedule
		l.sched.Store(&sc)
		l.log.Info("run schedule changed", "priority", sc.Priority, "weight", sc.Share(), "paused", sc.Paused,
			"was_priority", was.Priority, "was_weight", was.Share(), "was_paused", was.Paused)
		w.runs.changed.notify()
		return
	}
	if w.cfg.Run != "" {
		return
	}
	if lack := schema.LackOf(m); lack != nil {
		w.skipLacking(m, lack)
		return
	}
	if w.cfg.Refuse != nil {
		if err := w.cfg.Refuse(m); err != nil {
			w.skip(m, err.Error())
			return
		}
	}
	served, err := w.serves(ctx, m.Model)
	if err != nil {
		w.skip(m, fmt.Sprintf("cannot tell whether the backend serves the run's model %q: %v", m.Model, err))
		return
	}
	if !served {
		w.skip(m, fmt.Sprintf("the backend does not serve the run's model %q", m.Model))
		return
	}
	l := newLane(m, w.log, false)
	if err := openLane(ctx, w.link.js, w.cfg, l); err != nil {
		w.skip(m, err.Error())
		return
	}
	w.skipped.Delete(m.Run)
	w.metrics.addRun(l.run)
	w.runs.add(l)
	w.follow(ctx, l)
	sc := l.schedule()
	l.log.Info("serving run", "model", m.Model, "turns", m.TurnsMode(), "total", m.Total,
		"priority", sc.Priority, "weight", sc.Share(), "paused", sc.Paused, "ack_wait", l.ackWait, "max_deliver", l.maxDeliver)
}

// runGone stops pulls from a run whose manifest was deleted.
func (w *runWatch) runGone(run string) {
	w.skipped.Delete(run)
	if l := w.runs.of(run); l != nil && !l.gone.Swap(true) {
		l.log.Info("run manifest deleted: no more prompts are pulled from the run; those held finish")
		w.runs.changed.notify()
	}
}

// skipRecheck is how often skipped runs are looked at again (the
// backend may have come to serve their model) and their heartbeats
// repeated.
const skipRecheck = time.Minute

// skippedRun is a run the worker does not serve, and why; lack is set
// when that is a feature it lacks.
type skippedRun struct {
	manifest *schema.Manifest
	reason   string
	lack     *schema.LackError
}

// skip records that m's run is not served, logging it the first time,
// and publishes a heartbeat for the run that says why, so that
// `aerie status` shows it.
func (w *runWatch) skip(m *schema.Manifest, reason string) {
	prev, seen := w.skipped.Swap(m.Run, skippedRun{manifest: m, reason: reason})
	if !seen || prev.(skippedRun).reason != reason {
		w.log.Warn("run skipped", "run", m.Run, "reason", reason)
	}
	w.report.skipped(m.Run, reason, nil)
}

// skipLacking records that m's run is not served because this build
// lacks features it needs: logged the first time, and said in a
// heartbeat every period (see beatLacking), since only an upgrade ends
// it.
func (w *runWatch) skipLacking(m *schema.Manifest, lack *schema.LackError) {
	_, seen := w.skipped.Swap(m.Run, skippedRun{manifest: m, reason: lack.Error(), lack: lack})
	if !seen {
		w.log.Error("run skipped: it needs features this worker lacks", "run", m.Run, "lacks", lack.Lacking,
			"written_by", lack.By, "version", schema.BuildVersion(), "err", lack)
	}
	w.report.skipped(m.Run, lack.Error(), lack)
}

// beatLacking repeats the heartbeats of the runs skipped for a feature
// this build lacks.
func (w *runWatch) beatLacking() {
	w.skipped.Range(func(_, v any) bool {
		if s := v.(skippedRun); s.lack != nil {
			w.report.skipped(s.manifest.Run, s.reason, s.lack)
		}
		return true
	})
}

// recheckSkipped looks at the skipped runs again.
func (w *runWatch) recheckSkipped(ctx context.Context) {
	w.models.forget()
	w.skipped.Range(func(_, v any) bool {
		w.runPut(ctx, v.(skippedRun).manifest)
		return ctx.Err() == nil
	})
}

// serves reports whether the backend serves model; true when the backend
// cannot say.
func (w *runWatch) serves(ctx context.Context, model string) (bool, error) {
	ml, ok := w.backend.(modelLister)
	if !ok {
		return true, nil
	}
	ids, err := w.models.get(ctx, ml)
	if err != nil {
		return false, err
	}
	return slices.Contains(ids, model), nil
}

// modelCache keeps the backend's model list for modelCacheFor, so that a
// bucket of many runs costs one /v1/models. The zero value is empty.
type modelCache struct {
	mu  sync.Mutex
	ids []string
	at  time.Time
}

const modelCacheFor = 30 * time.Second

func (c *modelCache) get(ctx context.Context, ml modelLister) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < modelCacheFor {
		return c.ids, nil
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	models, err := ml.Models(mctx)
	if err != nil {
		return nil, err
	}
	c.ids = c.ids[:0]
	for _, m := range models {
		c.ids = append(c.ids, m.ID)
	}
	c.at = time.Now()
	return c.ids, nil
}

// forget empties the cache: the next get asks the backend.
func (c *modelCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = time.Time{}
}

package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/spelling"
)

// manifestWarnInterval is how long WaitManifest waits before it warns
// that the run may not exist, and how often it warns again: long enough
// for a producer started at the same time to validate a large file and
// write the manifest, short enough that a mistyped --run or --nats is
// noticed in the first minutes of a run and not at its end.
var manifestWarnInterval = time.Minute

// bucketPoll is the wait before looking for the runs bucket again, after
// waiting for it for waited: a tenth of a second for the first half
// minute, so that a worker or an aggregator started beside its producer
// starts within a tenth of a second of the bucket's creation, then a
// second. Each look is one stream info request, nothing a server
// notices.
func bucketPoll(waited time.Duration) time.Duration {
	if waited < 30*time.Second {
		return 100 * time.Millisecond
	}
	return time.Second
}

// maxRunsListed is how many run names the warning lists.
const maxRunsListed = 20

// listRunsTimeout bounds the listing of the runs bucket for a warning.
const listRunsTimeout = 10 * time.Second

// WaitManifest returns the manifest of run, waiting for the producer to
// write it if needed: workers and aggregators may start before the
// prompts are queued. It logs once that it is waiting and, after a
// minute without a manifest and every minute after that, warns that the
// run has none yet and lists the runs this server does have, since the
// usual cause is a mistyped --run or a --nats pointing at another server.
// It never creates the runs bucket: the producer does, with the replicas
// it was given.
func WaitManifest(ctx context.Context, js jetstream.JetStream, run string, log *slog.Logger) (*schema.Manifest, error) {
	start := time.Now()
	kv, err := waitRunsBucket(ctx, js, run, start, log)
	if err != nil {
		return nil, err
	}
	watcher, err := kv.Watch(ctx, run)
	if err != nil {
		return nil, fmt.Errorf("watch manifest of run %s: %w", run, err)
	}
	defer watcher.Stop()
	// Warnings keep their cadence from start, whether or not the wait
	// began with the bucket missing.
	untilWarn := func() time.Duration { return manifestWarnInterval - time.Since(start)%manifestWarnInterval }
	warn := time.NewTimer(untilWarn())
	defer warn.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-warn.C:
			warnNoManifest(ctx, js, kv, run, start, log)
			warn.Reset(untilWarn())
		case e, ok := <-watcher.Updates():
			if !ok {
				return nil, errors.New("manifest watch ended")
			}
			if e == nil { // all current values delivered: none yet
				log.Info("waiting for the run manifest: run `aerie produce` for this run", "bucket", schema.RunsBucket, "key", run)
				// Other runs but not this one is most often a mistyped
				// --run: say so now, not after a minute.
				if names, _, err := runNames(ctx, kv, maxRunsListed); err == nil && len(names) > 0 {
					warnNoManifest(ctx, js, kv, run, start, log)
				}
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

// WaitRunsBucket opens the runs bucket, waiting for the first producer to
// create it: a worker of several runs may start before any run exists.
// It never creates the bucket: the producer does, with its replicas.
func WaitRunsBucket(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (jetstream.KeyValue, error) {
	return waitRunsBucket(ctx, js, "", time.Now(), log)
}

// waitRunsBucket opens the runs bucket, waiting for the first producer to
// create it; it warns like WaitManifest when that takes long (about run,
// when it is waited for).
func waitRunsBucket(ctx context.Context, js jetstream.JetStream, run string, start time.Time, log *slog.Logger) (jetstream.KeyValue, error) {
	nextWarn := start.Add(manifestWarnInterval)
	for attempt := 1; ; attempt++ {
		kv, err := js.KeyValue(ctx, schema.RunsBucket)
		switch {
		case err == nil:
			return kv, nil
		case errors.Is(err, jetstream.ErrBucketNotFound):
		default:
			return nil, fmt.Errorf("open KV bucket %s: %w", schema.RunsBucket, err)
		}
		if attempt == 1 {
			log.Info("waiting for the first `aerie produce`: KV bucket not created yet", "bucket", schema.RunsBucket)
		}
		if now := time.Now(); !now.Before(nextWarn) && run == "" {
			log.Warn(fmt.Sprintf("no run has been produced on this server yet (KV bucket %s does not exist); check --nats, or run `aerie produce`", schema.RunsBucket),
				"waited", now.Sub(start).Round(time.Second), "server", serverURL(js))
			nextWarn = now.Add(manifestWarnInterval)
		} else if !now.Before(nextWarn) {
			log.Warn(fmt.Sprintf("run %s has no manifest yet: no run at all has been produced on this server (KV bucket %s does not exist); "+
				"check --run and --nats, or run `aerie produce` for this run", run, schema.RunsBucket),
				"waited", now.Sub(start).Round(time.Second), "server", serverURL(js))
			nextWarn = now.Add(manifestWarnInterval)
		}
		t := time.NewTimer(min(bucketPoll(time.Since(start)), manifestWarnInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// warnNoManifest logs that run has no manifest yet, with the runs that
// do exist on this server.
func warnNoManifest(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, run string, start time.Time, log *slog.Logger) {
	runs, more, err := runNames(ctx, kv, maxRunsListed)
	existing := "no run exists on this server"
	switch {
	case err != nil:
		existing = "the runs on this server could not be listed (" + err.Error() + ")"
	case more > 0:
		existing = fmt.Sprintf("runs on this server: %s and %d more", strings.Join(runs, ", "), more)
	case len(runs) > 0:
		existing = "runs on this server: " + strings.Join(runs, ", ")
	}
	if near := nearest(run, runs); near != "" {
		existing += fmt.Sprintf(" (did you mean --run %s?)", near)
	}
	log.Warn(fmt.Sprintf("run %s has no manifest yet; %s; check --run and --nats, or run `aerie produce` for this run", run, existing),
		"waited", time.Since(start).Round(time.Second), "server", serverURL(js), "runs", runs)
}

// runNames returns the first limit run names in the runs bucket, sorted,
// and how many more there are.
func runNames(ctx context.Context, kv jetstream.KeyValue, limit int) ([]string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, listRunsTimeout)
	defer cancel()
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list the keys of bucket %s: %w", schema.RunsBucket, err)
	}
	slices.Sort(keys)
	if len(keys) > limit {
		return keys[:limit], len(keys) - limit, nil
	}
	return keys, 0, nil
}

// serverURL names the server js is connected to, without credentials.
func serverURL(js jetstream.JetStream) string {
	if nc := js.Conn(); nc != nil {
		return nc.ConnectedUrlRedacted()
	}
	return ""
}

// nearest is the name among names closest to run in edits, when it is
// close enough to be a slip of the keyboard (at most a third of its
// letters, and at least 1, changed); "" otherwise.
func nearest(run string, names []string) string {
	best, bestD := "", max(1, len(run)/3)+1
	for _, n := range names {
		if d := spelling.Distance(run, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

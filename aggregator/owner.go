package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/lockfile"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// LockFile is the file in <data-dir>/<run>/ that the writing aggregator
// holds an OS lock on.
const LockFile = ".aggregator.lock"

// DefaultLeaseWait is how long an aggregator waits for another one to let
// go of a run before it gives up: long enough for a holder that died
// without a word (kill -9, a lost host) to lose its lease, so that a
// restart succeeds; a holder still at work keeps it and is named.
const DefaultLeaseWait = provision.LeaseTTL + 15*time.Second

// HeldError says that another aggregator writes the run.
type HeldError struct {
	Run    string
	Holder string // who, as far as it can be told
	Waited time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("run %s is being written by another aggregator: %s (waited %v for it to stop): only one aggregator may write a run; stop that one first, or wait for it to finish",
		e.Run, e.Holder, e.Waited.Round(time.Second))
}

// FinishedError says that the run another aggregator holds is done:
// an aggregator started to finish it has nothing to do.
type FinishedError struct {
	Run, Holder              string
	Completed, Failed, Total int
}

func (e *FinishedError) Error() string {
	return fmt.Sprintf("run %s is done (%d completed, %d failed of %d) and another aggregator holds it: %s; nothing to do",
		e.Run, e.Completed, e.Failed, e.Total, e.Holder)
}

// owner is an aggregator's right to write a run's files, held in two
// ways: an OS lock on a file in the run's directory, which no other
// process on this host (or on a host sharing the directory) can take
// while this one lives, and a lease in NATS, which no aggregator anywhere
// can take while this one renews it. Both are let go by release; a
// process that dies loses the lock at once and the lease within
// provision.LeaseTTL.
type owner struct {
	run  string
	lock *lockfile.Lock
	kv   jetstream.KeyValue
	key  string
	me   schema.Lease
	log  *slog.Logger

	rev        atomic.Uint64
	validUntil atomic.Int64 // unix nanoseconds
}

// leaseMargin is how long before the lease would expire on the server
// that the aggregator stops writing, if it could not renew meanwhile.
const leaseMargin = provision.LeaseTTL / 3

// own takes the right to write run's output in dir, waiting up to wait
// for another aggregator to let go of it. dir must exist. finished, when
// not nil, is asked first each time the run is found held, with who holds
// it; an error from it ends the wait.
func own(ctx context.Context, js jetstream.JetStream, run, dir string, wait time.Duration, finished func(context.Context, string) error, log *slog.Logger) (*owner, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	host, _ := os.Hostname()
	o := &owner{run: run, key: schema.AggregatorLeaseKey(run), log: log,
		me: schema.Lease{Holder: host + ":" + strconv.Itoa(os.Getpid()) + ":" + uuid.NewString()[:8],
			Host: host, PID: os.Getpid(), Dir: abs}}
	deadline := time.Now().Add(wait)
	var lastLog time.Time
	waiting := func(holder string) error {
		if finished != nil {
			if err := finished(ctx, holder); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return &HeldError{Run: run, Holder: holder, Waited: max(wait, 0)}
		}
		if time.Since(lastLog) >= 15*time.Second {
			lastLog = time.Now()
			log.Warn("another aggregator writes this run; waiting for it to stop", "holder", holder, "wait_up_to", time.Until(deadline).Round(time.Second))
		}
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	what := "aerie aggregate of run " + run
	for o.lock == nil {
		l, err := lockfile.Acquire(filepath.Join(dir, LockFile), what)
		var held *lockfile.HeldError
		switch {
		case errors.As(err, &held):
			if err := waiting(held.Holder.String() + ", writing " + abs); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, fmt.Errorf("aggregator: %w", err)
		default:
			o.lock = l
		}
	}
	if o.kv, err = provision.LeasesBucket(ctx, js, provision.Options{Replicas: provision.Replicas(ctx, js)}); err != nil {
		o.lock.Release()
		return nil, fmt.Errorf("aggregator: %w", err)
	}
	for {
		err := o.take(ctx)
		var held *HeldError
		if !errors.As(err, &held) {
			if err != nil {
				o.lock.Release()
				return nil, err
			}
			return o, nil
		}
		if err := waiting(held.Holder); err != nil {
			o.lock.Release()
			return nil, err
		}
	}
}

// take makes one attempt at the lease. A lease held by an aggregator of
// this host writing this same directory is taken over: this process holds
// the directory's lock, so that aggregator is dead.
func (o *owner) take(ctx context.Context) error {
	now := time.Now().UTC()
	o.me.AcquiredAt, o.me.RenewedAt = now, now
	value, _ := json.Marshal(o.me)
	rev, err := o.kv.Create(ctx, o.key, value)
	if err == nil {
		o.held(rev, now)
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("aggregator: take the lease %s in bucket %s: %w", o.key, schema.LeasesBucket, err)
	}
	e, err := o.kv.Get(ctx, o.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &HeldError{Run: o.run, Holder: "an aggregator whose lease just expired"}
	}
	if err != nil {
		return fmt.Errorf("aggregator: read the lease %s in bucket %s: %w", o.key, schema.LeasesBucket, err)
	}
	var them schema.Lease
	_ = json.Unmarshal(e.Value(), &them)
	if them.Host == o.me.Host && them.Dir == o.me.Dir {
		rev, err := o.kv.Update(ctx, o.key, value, e.Revision())
		if err == nil {
			o.log.Info("took over the lease of a dead aggregator of this host", "was", them.Holder)
			o.held(rev, now)
			return nil
		}
		return &HeldError{Run: o.run, Holder: describeLease(them, e)}
	}
	return &HeldError{Run: o.run, Holder: describeLease(them, e)}
}

func describeLease(l schema.Lease, e jetstream.KeyValueEntry) string {
	if l.Holder == "" {
		return fmt.Sprintf("an unknown holder (lease %s in bucket %s, written %s ago)", e.Key(), schema.LeasesBucket, time.Since(e.Created()).Round(time.Second))
	}
	return fmt.Sprintf("pid %d on %s writing %s (lease %s in bucket %s, renewed %s ago)",
		l.PID, l.Host, l.Dir, e.Key(), schema.LeasesBucket, time.Since(e.Created()).Round(time.Second))
}

// held records a successful write of the lease, sent at sent.
func (o *owner) held(rev uint64, sent time.Time) {
	o.rev.Store(rev)
	o.validUntil.Store(sent.Add(provision.LeaseTTL - leaseMargin).UnixNano())
}

// valid reports whether the lease was renewed recently enough that no
// other aggregator can have it: output may be written.
func (o *owner) valid() bool { return time.Now().UnixNano() < o.validUntil.Load() }

// keep renews the lease every third of its TTL until ctx ends. It returns
// an error only when the lease is lost for good: another aggregator holds
// it now, so this one must stop writing.
func (o *owner) keep(ctx context.Context) error {
	t := time.NewTicker(provision.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := o.renew(ctx); err != nil {
			var held *HeldError
			if errors.As(err, &held) {
				return fmt.Errorf("aggregator: lost the right to write run %s to %s: stopping (this one could not renew its lease in time)", o.run, held.Holder)
			}
			switch {
			case ctx.Err() != nil:
			case provision.IsNoRoom(err):
				o.log.Warn("cannot renew the aggregator's lease: the JetStream store is full; output waits until there is room (remove an old run with aerie runs rm, or raise the server's max_file_store)", "err", err)
			default:
				o.log.Warn("cannot renew the aggregator's lease; output waits until it is renewed", "err", err)
			}
		}
	}
}

// renew writes the lease again, or takes it anew if it expired while no
// one else took it.
func (o *owner) renew(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, provision.LeaseTTL/3)
	defer cancel()
	now := time.Now().UTC()
	o.me.RenewedAt = now
	value, _ := json.Marshal(o.me)
	rev, err := o.kv.Update(rctx, o.key, value, o.rev.Load())
	if err == nil {
		o.held(rev, now)
		return nil
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return o.take(rctx) // expired (or taken): take it again if free
	}
	return err
}

// release lets go of the lease and the lock.
func (o *owner) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.kv.Delete(ctx, o.key, jetstream.LastRevision(o.rev.Load())); err != nil {
		o.log.Warn("cannot release the aggregator's lease; it expires by itself", "err", err, "within", provision.LeaseTTL)
	}
	o.lock.Release()
}

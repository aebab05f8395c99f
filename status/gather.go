package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// ErrNoRun is returned by Gather for a run without a manifest.
var ErrNoRun = errors.New("no such run")

// Gather reads the state of run from the server. It changes nothing but
// for a short-lived consumer on the events stream that reads the recent
// heartbeats (see heartbeats). A run without a manifest is an error
// wrapping ErrNoRun.
func Gather(ctx context.Context, js jetstream.JetStream, run string, opts Options) (*Run, error) {
	if err := schema.ValidateRun(run); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	r := reader{js: js, opts: opts.Request}
	now := time.Now()
	st := &Run{Run: run, FailedByReason: map[string]int{}, Workers: []Worker{},
		ETASec: -1, ETALowSec: -1, ETAHighSec: -1}
	e, err := r.key(ctx, schema.RunsBucket, run)
	if err != nil {
		return nil, fmt.Errorf("status of run %s: %w", run, err)
	}
	if e == nil {
		return nil, fmt.Errorf("run %s has no manifest on this server: check the name (aerie status without --run lists the runs) and --nats: %w", run, ErrNoRun)
	}
	m, err := schema.DecodeManifest(e.Value())
	if err != nil {
		return nil, fmt.Errorf("run %s: its manifest cannot be read: %w", run, err)
	}
	st.Model, st.Total, st.CreatedAt, st.Producer = m.Model, m.Total, m.CreatedAt, m.Producer
	st.Priority, st.Weight, st.Paused = m.Priority, m.Share(), m.Paused
	st.Needs, st.WrittenBy = m.Needs, m.WrittenBy
	// gatherQueue comes after gatherWorkers: the consumer's count of
	// prompts in flight replaces the workers' sum when there is one.
	for _, step := range []func(context.Context, reader, *Run, Options, time.Time) error{
		gatherEvent, gatherWorkers, gatherQueue, gatherLease, settle,
	} {
		if err := step(ctx, r, st, opts, now); err != nil {
			return nil, fmt.Errorf("status of run %s: %w", run, err)
		}
	}
	return st, nil
}

// age is when a message was stored, as of now.
func age(at, now time.Time, staleAfter time.Duration) Age {
	a := now.Sub(at)
	return Age{At: at, AgeSec: a.Seconds(), Stale: a > staleAfter}
}

// lastThroughput reads the run's last throughput event, or nil.
func lastThroughput(ctx context.Context, r reader, events jetstream.Stream, run string) (*schema.Throughput, time.Time, error) {
	msg, err := r.lastMsg(ctx, events, schema.ThroughputSubject(run))
	if err != nil || msg == nil {
		return nil, time.Time{}, err
	}
	var ev schema.Throughput
	if json.Unmarshal(msg.Data, &ev) != nil {
		return nil, time.Time{}, nil // an unreadable event says nothing
	}
	return &ev, msg.Time, nil
}

func gatherEvent(ctx context.Context, r reader, st *Run, opts Options, now time.Time) error {
	events, err := r.stream(ctx, schema.EventsStream)
	if err != nil || events == nil {
		return err
	}
	ev, at, err := lastThroughput(ctx, r, events, st.Run)
	if err != nil || ev == nil {
		return err
	}
	a := age(at, now, opts.EventStaleAfter)
	a.Stale = a.Stale && ev.Phase != schema.PhaseDone
	st.Event = &a
	st.Phase, st.Completed, st.Failed, st.Truncated = ev.Phase, ev.Completed, ev.Failed, ev.Truncated
	st.HintedAnswers, st.HintRankCorrelation = ev.HintedAnswers, ev.HintRankCorrelation
	for reason, n := range ev.FailedByReason {
		st.FailedByReason[reason] = n
	}
	st.RequestsPerSec, st.TokensPerSec = ev.RequestsPerSec, ev.TokensPerSec
	st.RequestsPerSecOverall, st.TokensPerSecOverall = ev.RequestsPerSecOverall, ev.TokensPerSecOverall
	st.Task, st.HiddenStatesBytes, st.HiddenStatesBytesTotal, st.HiddenStatesBytesPerSec = ev.Task, ev.HiddenStatesBytes, ev.HiddenStatesBytesTotal, ev.HiddenStatesBytesPerSec
	st.ETASec, st.ETALowSec, st.ETAHighSec = eta(ev)
	st.Stragglers = ev.Stragglers
	st.ElapsedSec, st.WriteError, st.Unwritten = ev.ElapsedSec, ev.WriteError, ev.Unwritten
	st.AggregatorVersion, st.AggregatorLacks, st.AggregatorLacksWrittenBy = ev.AggregatorVersion, ev.AggregatorLacks, ev.AggregatorLacksWrittenBy
	if ev.Total > 0 && st.Total == 0 {
		st.Total = ev.Total
	}
	return nil
}

// eta is an event's ETA and band. A band that does not hold the ETA
// (zeros, from an aggregator older than the band) is unknown: -1.
func eta(ev *schema.Throughput) (sec, low, high float64) {
	sec, low, high = ev.ETASec, ev.ETALowSec, ev.ETAHighSec
	if sec < 0 {
		return -1, -1, -1
	}
	if low < 0 || low > sec || high < sec {
		low, high = -1, -1
	}
	return sec, low, high
}

func gatherQueue(ctx context.Context, r reader, st *Run, _ Options, _ time.Time) error {
	workers, err := r.consumer(ctx, schema.PromptsStream, schema.WorkersConsumer(st.Run))
	if err != nil {
		return err
	}
	if workers == nil {
		st.Queue.Missing = append(st.Queue.Missing, schema.WorkersConsumer(st.Run))
	} else {
		st.Queue.Pending, st.Queue.AckPending, st.Queue.Redelivered = workers.NumPending, workers.NumAckPending, workers.NumRedelivered
		st.InFlight = workers.NumAckPending
		st.ackWait = workers.Config.AckWait
	}
	for _, c := range []struct {
		stream, name string
		into         *uint64
	}{
		{schema.ResultsStream, schema.ResultsConsumer(st.Run), &st.Queue.ResultsToWrite},
		{schema.DeadStream, schema.DeadConsumer(st.Run), &st.Queue.FailuresToWrite},
	} {
		info, err := r.consumer(ctx, c.stream, c.name)
		if err != nil {
			return err
		}
		if info == nil {
			st.Queue.Missing = append(st.Queue.Missing, c.name)
			continue
		}
		*c.into = info.NumPending + uint64(info.NumAckPending)
	}
	return nil
}

func gatherLease(ctx context.Context, r reader, st *Run, _ Options, _ time.Time) error {
	e, err := r.key(ctx, schema.LeasesBucket, schema.AggregatorLeaseKey(st.Run))
	if err != nil || e == nil {
		return err
	}
	// The bucket's TTL removes a lease its holder stopped renewing: a key
	// that is there is held.
	var l schema.Lease
	_ = json.Unmarshal(e.Value(), &l) // unreadable: held all the same
	st.Aggregator = &Aggregator{Host: l.Host, PID: l.PID, Dir: l.Dir}
	return nil
}

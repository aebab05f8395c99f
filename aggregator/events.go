package aggregator

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// snapshotNow is the run's state at now, as the next event reports it.
func (a *Aggregator) snapshotNow(now time.Time) schema.Throughput {
	s := a.est.Snapshot(now)
	a.mu.Lock()
	s.FailedByReason = a.failed.byReason()
	a.mu.Unlock()
	a.last.Lock()
	defer a.last.Unlock()
	s.WriteError = a.writeErr
	s.AggregatorVersion = schema.BuildVersion()
	if le := a.lacks.Load(); le != nil {
		s.AggregatorLacks, s.AggregatorLacksWrittenBy = le.Lacking, le.By
	}
	for w, p := range a.paused {
		if now.Sub(p.at) > pausedStale {
			delete(a.paused, w) // gone quiet: no longer a live worker
			continue
		}
		if s.PausedWorkers == nil {
			s.PausedWorkers = map[string]string{}
		}
		s.PausedWorkers[w] = p.reason
	}
	a.noteSlots(&s)
	if a.bytesPerToken > 0 {
		s.Task = schema.TaskHiddenStates
		s.HiddenStatesBytes = int64(s.MeanCompletionTokens*float64(s.Completed)+0.5) * a.bytesPerToken
		s.HiddenStatesBytesTotal = a.bytesTotal
		s.HiddenStatesBytesPerSec = s.TokensPerSec * float64(a.bytesPerToken)
		a.extractionETA(&s, now)
	}
	return s
}

// tick takes a snapshot, makes sure a run that looks done is (see
// confirmDone) and emits the event.
func (a *Aggregator) tick(ctx context.Context, now time.Time) {
	a.learnAckWait(ctx)
	a.readQueued(ctx)
	s := a.snapshotNow(now)
	a.noteUnwritten(ctx, &s, now)
	switch {
	case s.Phase != schema.PhaseDone:
		a.complete = time.Time{}
	case !a.confirmDone(ctx, now):
		s.Phase = schema.PhaseDraining
	case !a.finishOutput():
		s.Phase = schema.PhaseDraining
	}
	a.emit(s)
}

// readQueued sets a.queuedSeen while the last event found lines left and
// no worker holding any of the run's prompts, the state in which the run
// may be waiting for slots; it costs one consumer info request then. A
// consumer not created yet, or not readable, leaves it unknown (-1).
func (a *Aggregator) readQueued(ctx context.Context) {
	prev := a.Last()
	if prev.Phase == schema.PhaseDone || prev.InFlight > 0 || prev.Completed+prev.Failed >= prev.Total {
		a.queuedSeen.Store(-1)
		return
	}
	info, err := a.consumerInfo(ctx, schema.PromptsStream, schema.WorkersConsumer(a.cfg.Run))
	if err != nil { // not created yet, or not readable: unknown
		a.queuedSeen.Store(-1)
		return
	}
	a.queuedSeen.Store(int64(min(info.NumPending, math.MaxInt64)))
}

// emit sends an event everywhere it goes: the events subject,
// events.jsonl, one log line and Config.OnEvent. An event of phase done
// ends Run when ExitWhenDone is set.
func (a *Aggregator) emit(s schema.Throughput) {
	a.last.Lock()
	a.snapshot = s
	a.last.Unlock()

	b, err := json.Marshal(s)
	if err != nil {
		a.log.Error("encode throughput event", "err", err)
		return
	}
	if err := a.nc.Publish(schema.ThroughputSubject(a.cfg.Run), b); err != nil {
		a.log.Warn("publish throughput event", "err", err)
	}
	if _, err := a.events.Write(append(b, '\n')); err != nil {
		a.log.Warn("append to events file", "err", err)
	}
	args := []any{
		"phase", s.Phase, "completed", s.Completed, "total", s.Total, "failed", s.Failed,
		"truncated", s.Truncated, "in_flight", s.InFlight, "workers", s.Workers,
		"req_per_s", round(s.RequestsPerSec, 2), "req_per_s_overall", round(s.RequestsPerSecOverall, 2),
		"tok_per_s", round(s.TokensPerSec, 0), "tok_per_s_overall", round(s.TokensPerSecOverall, 0),
		"mean_tokens", round(s.MeanCompletionTokens, 0), "est_tokens", round(s.EstimatedCompletionTokens, 0),
		"elapsed", (time.Duration(s.ElapsedSec) * time.Second).String(), "eta", ETA(s.ETASec),
		"eta_low", ETA(s.ETALowSec), "eta_high", ETA(s.ETAHighSec),
	}
	if s.Stranded > 0 { // held by silent workers: back within the AckWait
		args = append(args, "stranded", s.Stranded, "stranded_back", ETA(s.StrandedBackSec))
	}
	if s.Task == schema.TaskHiddenStates { // tokens are input tokens extracted
		args = append(args, "hidden_states_bytes", s.HiddenStatesBytes, "hidden_states_bytes_total", s.HiddenStatesBytesTotal,
			"hidden_states_bytes_per_sec", int64(s.HiddenStatesBytesPerSec))
	}
	if s.TotalTurns > 0 { // --turns all: the ETA counts turns
		args = append(args, "turns_completed", s.CompletedTurns, "turns_total", s.TotalTurns)
	}
	a.log.Info("progress", args...)
	if s.WriteError != "" {
		a.log.Error("output is not being written", "err", s.WriteError)
	}
	for w, reason := range s.PausedWorkers {
		if reason != schema.PausedStopping { // a clean stop is not news
			a.log.Warn("worker paused", "worker", w, "reason", reason)
		}
	}
	if a.cfg.OnEvent != nil {
		a.cfg.OnEvent(s)
	}
	if a.cfg.Observer != nil {
		a.cfg.Observer.Event(s)
	}
	if s.Phase == schema.PhaseDone {
		a.doneOnce.Do(func() { close(a.done) })
	}
}

// pausedStale is how long a paused worker's last heartbeat counts: the
// estimator's default for live workers.
const pausedStale = 10 * time.Second

// ETA formats an ETA in seconds for people: "unknown" when negative.
func ETA(sec float64) string {
	if sec < 0 {
		return "unknown"
	}
	return (time.Duration(sec) * time.Second).String()
}

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// learnAckWait gives the estimator the workers consumer's AckWait, so
// that the ETA waits for the prompts a silent worker held (see
// throughput.Config.AckWait). Tried every event until the consumer is
// there; a failure is tried again at the next.
func (a *Aggregator) learnAckWait(ctx context.Context) {
	if a.ackWaitKnown {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := a.js.Consumer(qctx, schema.PromptsStream, schema.WorkersConsumer(a.cfg.Run))
	if err != nil {
		return
	}
	a.est.SetAckWait(c.CachedInfo().Config.AckWait)
	a.ackWaitKnown = true
}

package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/url"
	"os"
	"time"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/flights"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// reporter publishes the worker's heartbeats, one per run it serves, and
// is what Stats and the metrics read the worker's state through: every
// part of it that says what the worker does now reads the same things
// the same way (the window's size, the requests at the backend, the
// pauses). Its fields are set by New; each lane's beat is the heartbeats
// goroutine's.
type reporter struct {
	name string
	log  *slog.Logger
	link *link
	// oneRun is set for a worker of one run (Config.Run), which beats
	// every period whatever its run does.
	oneRun bool
	// host and backend are what heartbeats say of where this worker
	// runs and where its requests go (see schema.Heartbeat).
	host, backend string
	period        time.Duration

	runs     *runSet
	slots    *window.Window
	flights  *flights.Registry
	pauses   *pauses
	requests *requester
	hedges   *hedger
	sched    *scheduler
	control  *controller
}

// heartbeats publishes a Heartbeat every period until ctx ends. The
// aggregator measures token throughput from them, which is right from
// the first seconds of a run, long before completions are.
func (r *reporter) heartbeats(ctx context.Context) {
	t := time.NewTicker(r.period)
	defer t.Stop()
	r.publish()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.publish()
		case <-r.control.beatNow:
			r.publish()
		}
	}
}

// heartbeat is the worker's heartbeat for l's run: the counters and
// requests of the run, the window and free slots of the worker.
func (r *reporter) heartbeat(l *lane) schema.Heartbeat {
	size := r.slots.Capacity()
	free := policy.FreeSlots(size, int(r.requests.generating.Load()))
	hb := schema.Heartbeat{
		Run: l.run, Worker: r.name, Time: time.Now().UTC(),
		Host: r.host, Backend: r.backend,
		Window: size, InFlight: int(l.n.held.Load()), FreeSlots: &free,
		TokensStreamed: l.n.tokens.Load(), Completed: l.n.completed.Load(),
		DeadLettered: l.n.deadLettered.Load(), Retried: l.n.retried.Load(),
		InterimTurns: int(l.n.interimTurns.Load()), TailHold: l.tailHold.Load(), HintHold: l.hintHold.Load(),
		ConsumerFull: l.consumerFull.Load(),
		Hedgeable:    r.hedges.hedgeable(l, time.Now()),
		Hedges:       l.n.hedges.Load(), HedgesWon: l.n.hedgesWon.Load(), HedgedTokens: l.n.hedgedTokens.Load(),
		Speed:   math.Float64frombits(r.control.speed.Load()),
		Version: schema.BuildVersion(), Features: builtFeatures,
	}
	if ratios, seen := l.hintErr.sorted(); policy.HintError(ratios, seen) > 0 {
		hb.HintError, hb.HintedAnswers = policy.HintError(ratios, seen), seen
	}
	for _, o := range r.runs.serving() {
		if o != l {
			hb.OtherRuns += int(o.n.held.Load())
		}
	}
	now := time.Now()
	for _, f := range r.flights.Lane(l.index) {
		hb.InFlightTokens = append(hb.InFlightTokens, int(f.Tokens))
		var age int64
		if !f.Sent.IsZero() {
			age = now.Sub(f.Sent).Milliseconds()
		}
		hb.InFlightMillis = append(hb.InFlightMillis, age)
	}
	if p := r.pauses.of(l).Pause(); p.Paused {
		hb.Paused, hb.PausedReason = true, p.Reason
	}
	if le := l.lacks.Load(); le != nil {
		hb.Lacks, hb.LacksWrittenBy = le.Lacking, le.By
	}
	return hb
}

// publish publishes the worker's heartbeat for each run it serves:
// every period for a run it works on, and every quietEvery periods for
// one that has had nothing to deliver for a while, so that a worker of
// many finished runs does not fill the events stream.
func (r *reporter) publish() {
	now := time.Now()
	for _, l := range r.runs.serving() {
		if l.gone.Load() || !r.due(l, now) {
			continue
		}
		r.send(l.run, r.heartbeat(l), l.log)
	}
}

// skipped publishes a heartbeat for a run this worker skips: paused,
// with the reason, and what it lacks when that is why (nil otherwise).
func (r *reporter) skipped(run, reason string, lack *schema.LackError) {
	hb := schema.Heartbeat{Run: run, Worker: r.name, Time: time.Now().UTC(), Host: r.host, Backend: r.backend,
		Paused: true, PausedReason: "skipped: " + reason, Version: schema.BuildVersion(), Features: builtFeatures}
	if lack != nil {
		hb.Lacks, hb.LacksWrittenBy = lack.Lacking, lack.By
	}
	r.send(run, hb, r.log.With("run", run))
}

// builtFeatures is what heartbeats say this build implements.
var builtFeatures = schema.Implemented()

func (r *reporter) send(run string, hb schema.Heartbeat, log *slog.Logger) {
	b, err := json.Marshal(hb)
	if err != nil {
		log.Error("encode heartbeat", "err", err)
		return
	}
	if err := r.link.nc.Publish(schema.HeartbeatSubject(run, r.name), b); err != nil {
		log.Warn("publish heartbeat", "err", err)
	}
}

// quietEvery is how many heartbeat periods apart a run that has had
// nothing to deliver for a minute gets its heartbeats.
const quietEvery = 30

// due reports whether l's heartbeat is due now. Only the heartbeats
// goroutine calls it.
func (r *reporter) due(l *lane, now time.Time) bool {
	tokens := l.n.tokens.Load()
	quiet := !r.oneRun && l.n.held.Load() == 0 && tokens == l.beat.tokens && r.sched.idleFor(l, now) >= emptyLongAfter
	l.beat.tokens = tokens
	if !quiet {
		l.beat.quiet = 0
		return true
	}
	l.beat.quiet++
	return l.beat.quiet%quietEvery == 1
}

// heartbeatHost is the host name heartbeats carry; empty when the system
// cannot tell it.
func heartbeatHost() string {
	h, _ := os.Hostname()
	return h
}

// backendLabel is the backend's URL as heartbeats show it: without user
// info, query or fragment, so that no credential can reach an event.
// Empty when the backend cannot say, or its URL cannot be read.
func backendLabel(b Backend) string {
	bu, ok := b.(baseURLer)
	if !ok {
		return ""
	}
	u, err := url.Parse(bu.BaseURL())
	if err != nil || u.Host == "" {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

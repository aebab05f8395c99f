package worker

import (
	"context"
	"encoding/json"
	"math"
	"net/url"
	"os"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// heartbeats publishes a Heartbeat every Config.Heartbeat until ctx ends.
// The aggregator measures token throughput from them, which is right from
// the first seconds of a run, long before completions are.
func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	w.publishHeartbeats()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.publishHeartbeats()
		case <-w.beatNow:
			w.publishHeartbeats()
		}
	}
}

// heartbeat is the worker's heartbeat for l's run: the counters and
// requests of the run, the window and free slots of the worker.
func (w *Worker) heartbeat(l *lane) schema.Heartbeat {
	size := w.win.capacity()
	free := max(size-int(w.generating.Load()), 0)
	hb := schema.Heartbeat{
		Run: l.run, Worker: w.cfg.Name, Time: time.Now().UTC(),
		Host: w.host, Backend: w.backendURL,
		Window: size, InFlight: int(l.n.held.Load()), FreeSlots: &free,
		TokensStreamed: l.n.tokens.Load(), Completed: l.n.completed.Load(),
		DeadLettered: l.n.deadLettered.Load(), Retried: l.n.retried.Load(),
		InterimTurns: int(l.n.interimTurns.Load()), TailHold: l.tailHold.Load(),
		ConsumerFull: l.consumerFull.Load(),
		Hedgeable:    w.hedgeable(l, time.Now()),
		Hedges:       l.n.hedges.Load(), HedgesWon: l.n.hedgesWon.Load(), HedgedTokens: l.n.hedgedTokens.Load(),
		Speed: math.Float64frombits(w.speed.Load()),
	}
	if ratios, seen := l.hintErr.sorted(); hintError(ratios, seen) > 0 {
		hb.HintError, hb.HintedAnswers = hintError(ratios, seen), seen
	}
	for _, o := range w.serving() {
		if o != l {
			hb.OtherRuns += int(o.n.held.Load())
		}
	}
	w.inFlight.Range(func(_, v any) bool {
		if f := v.(*flight); f.lane == l {
			hb.InFlightTokens = append(hb.InFlightTokens, int(f.tokens.Load()))
		}
		return true
	})
	if sc := l.schedule(); sc.Paused {
		hb.Paused, hb.PausedReason = true, schema.PausedRun
	}
	if open, reason := w.breaker.isOpen(); open {
		hb.Paused, hb.PausedReason = true, reason
	}
	if full, _ := w.room.isFull(); full {
		hb.Paused, hb.PausedReason = true, storeFullReason
	}
	if r := w.paused.Load(); r != nil {
		hb.Paused, hb.PausedReason = true, *r
	}
	return hb
}

// publishHeartbeats publishes the worker's heartbeat for each run it
// serves: every period for a run it works on, and every quietEvery
// periods for one that has had nothing to deliver for a while, so that a
// worker of many finished runs does not fill the events stream.
func (w *Worker) publishHeartbeats() {
	now := time.Now()
	for _, l := range w.serving() {
		if l.gone.Load() || !w.beatDue(l, now) {
			continue
		}
		b, err := json.Marshal(w.heartbeat(l))
		if err != nil {
			l.log.Error("encode heartbeat", "err", err)
			continue
		}
		if err := w.nc.Publish(schema.HeartbeatSubject(l.run, w.cfg.Name), b); err != nil {
			l.log.Warn("publish heartbeat", "err", err)
		}
	}
}

// quietEvery is how many heartbeat periods apart a run that has had
// nothing to deliver for a minute gets its heartbeats.
const quietEvery = 30

// beatDue reports whether l's heartbeat is due now. Only the heartbeats
// goroutine calls it.
func (w *Worker) beatDue(l *lane, now time.Time) bool {
	tokens := l.n.tokens.Load()
	quiet := w.cfg.Run == "" && l.n.held.Load() == 0 && tokens == l.beat.tokens && w.sched.idleFor(l, now) >= emptyLongAfter
	l.beat.tokens = tokens
	if !quiet {
		l.beat.quiet = 0
		return true
	}
	l.beat.quiet++
	return l.beat.quiet%quietEvery == 1
}

// baseURLer is implemented by backends that can say where they send
// requests (*openai.Client does).
type baseURLer interface {
	BaseURL() string
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

package worker

import (
	"context"
	"encoding/json"
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
		}
	}
}

// heartbeat is the worker's heartbeat for l's run.
func (w *Worker) heartbeat(l *lane) schema.Heartbeat {
	held, _ := w.win.holding()
	hb := schema.Heartbeat{
		Run: l.run, Worker: w.cfg.Name, Time: time.Now().UTC(),
		Host: w.host, Backend: w.backendURL,
		Window: w.win.capacity(), InFlight: held,
		TokensStreamed: w.tokens.Load(), Completed: w.completed.Load(),
		DeadLettered: w.deadLettered.Load(), Retried: w.retried.Load(),
		InterimTurns: int(w.interimTurns.Load()), TailHold: l.tailHold.Load(),
		ConsumerFull: l.consumerFull.Load(),
	}
	w.inFlight.Range(func(_, v any) bool {
		hb.InFlightTokens = append(hb.InFlightTokens, int(v.(*flight).tokens.Load()))
		return true
	})
	if open, reason := w.breaker.isOpen(); open {
		hb.Paused, hb.PausedReason = true, reason
	}
	if r := w.paused.Load(); r != nil {
		hb.Paused, hb.PausedReason = true, *r
	}
	return hb
}

// publishHeartbeats publishes the worker's heartbeat for each run it
// serves.
func (w *Worker) publishHeartbeats() {
	for _, l := range w.serving() {
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

package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// heartbeats publishes a Heartbeat every Config.Heartbeat until ctx ends.
// The aggregator measures token throughput from them, which is right from
// the first seconds of a run, long before completions are.
func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	w.publishHeartbeat()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.publishHeartbeat()
		}
	}
}

func (w *Worker) heartbeat() schema.Heartbeat {
	held, _ := w.win.holding()
	hb := schema.Heartbeat{
		Run: w.cfg.Run, Worker: w.cfg.Name, Time: time.Now().UTC(),
		Window: w.cfg.Window, InFlight: held,
		TokensStreamed: w.tokens.Load(), Completed: w.completed.Load(),
		DeadLettered: w.deadLettered.Load(), Retried: w.retried.Load(),
		InterimTurns: int(w.interimTurns.Load()),
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

func (w *Worker) publishHeartbeat() {
	b, err := json.Marshal(w.heartbeat())
	if err != nil {
		w.log.Error("encode heartbeat", "err", err)
		return
	}
	if err := w.nc.Publish(schema.HeartbeatSubject(w.cfg.Run, w.cfg.Name), b); err != nil {
		w.log.Warn("publish heartbeat", "err", err)
	}
}

package status

import (
	"context"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// settle puts the figures of different ages together: the prompts that
// silent workers hold and when they come back (the ETA cannot be
// earlier), and the workers' own token rates where the aggregator's
// event has none.
func settle(_ context.Context, _ reader, st *Run, _ Options, _ time.Time) error {
	strand(st)
	var live float64
	var measured bool
	for _, w := range st.Workers {
		if !w.Heartbeat.Stale && w.TokensPerSec >= 0 {
			live += w.TokensPerSec
			measured = true
		}
	}
	st.TokensPerSecFrom = "event"
	if measured && st.Phase != schema.PhaseDone && (st.Event == nil || st.Event.Stale || st.TokensPerSec <= 0) {
		st.TokensPerSec, st.TokensPerSecFrom = live, "heartbeats"
	}
	return nil
}

// strand fills Stranded from the workers that went silent without
// saying they stop, whose prompts the AckWait has not given back yet,
// and holds the ETA (and its band) no earlier than their return.
func strand(st *Run) {
	if st.ackWait <= 0 || st.Phase == schema.PhaseDone {
		return
	}
	var s Stranded
	for i := range st.Workers {
		w := &st.Workers[i]
		if !w.Heartbeat.Stale || w.Paused == schema.PausedStopping || w.Held == 0 {
			continue
		}
		back := st.ackWait.Seconds() - w.Heartbeat.AgeSec
		if back <= 0 {
			continue // given back already
		}
		w.BackInSec = back
		s.Prompts += w.Held
		s.Workers = append(s.Workers, w.Name)
		s.BackInSec = max(s.BackInSec, back)
	}
	if s.Prompts == 0 {
		return
	}
	s.Prompts = min(s.Prompts, st.Queue.AckPending)
	s.AckWaitSec = st.ackWait.Seconds()
	st.Stranded = &s
	if st.ETASec >= 0 && st.ETASec < s.BackInSec {
		st.ETASec = s.BackInSec
	}
	if st.ETALowSec >= 0 {
		st.ETALowSec = max(st.ETALowSec, s.BackInSec)
		st.ETAHighSec = max(st.ETAHighSec, st.ETASec)
	}
}

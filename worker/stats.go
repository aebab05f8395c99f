package worker

import "time"

// Stats is a snapshot of a worker's counters.
type Stats struct {
	InFlight, MaxInFlight                          int
	TokensStreamed, Completed, DeadLettered, Retry int64
	// HandedBack counts prompts handed back uncounted because the backend
	// was down or they need a feature this worker lacks;
	// Paused is the total time spent with the breaker open.
	HandedBack int64
	// TailHandedBack counts prompts handed back at the end of a run,
	// without a first token, for an idle worker to take.
	TailHandedBack int64
	// TailHolds counts the times the worker began to hold back, near the
	// end of the run, from prompts the other workers would finish sooner.
	TailHolds int64
	// ConsumerFull is true while the run's consumer is full (its
	// MaxAckPending reached) with prompts waiting and this worker's slots
	// free.
	ConsumerFull bool
	Paused       time.Duration
	// StoreFull is the time spent waiting for room in a full JetStream
	// store (see storeGate).
	StoreFull time.Duration
	// AlreadySettled counts redelivered prompts settled with the outcome
	// an earlier delivery had stored, without being generated again.
	AlreadySettled int64
	// MaxGenerating is the most requests this worker has had at its
	// backend at once: never more than its window.
	MaxGenerating int
	// Window is the window's size now: Config.Window, or what an
	// automatic window has made it.
	Window int
	// Turns counts the answers generated and kept: one per completed
	// prompt with --turns last, one per turn with --turns all.
	Turns int64
	// Hedges counts the hedges this worker sent at the end of a run, and
	// HedgesWon those whose answer it stored first (counted in
	// Completed); HedgedAway counts its prompts acknowledged because a
	// hedge elsewhere stored their answer first; HedgedTokens the
	// completion tokens it generated and threw away because the other
	// copy won (see hedge.go).
	Hedges, HedgesWon, HedgedAway, HedgedTokens int64
	// Runs are the counters of each run served, by name.
	Runs map[string]RunStats
}

// RunStats are a worker's counters for one run.
type RunStats struct {
	// Pulling is set while the worker pulls the run's prompts; Paused
	// says why it is paused, when it is (stopping, the store full, its
	// backend down, the run paused), and TailHold and HintHold are set
	// while it holds back from them near the end of the run, or from
	// length hints too long for its server.
	Pulling            bool
	Paused             string
	TailHold, HintHold bool
	// InFlight is the run's prompts delivered and not yet settled.
	InFlight                       int
	TokensStreamed, Turns          int64
	Completed, DeadLettered        int64
	Retry, HandedBack              int64
	TailHandedBack, AlreadySettled int64
}

// Stats returns the worker's counters. MaxInFlight is the most prompts
// this worker has held at once: never more than twice its window (one
// generating and one being stored per slot; see heldPerSlot), while
// MaxGenerating never exceeds the window.
func (w *Worker) Stats() Stats {
	r := w.report
	held, maxHeld := r.slots.Holding()
	s := Stats{
		InFlight: held, MaxInFlight: maxHeld, MaxGenerating: int(r.requests.most.Load()), Window: r.slots.Capacity(),
		Paused: r.pauses.breaker.pausedFor(), Runs: map[string]RunStats{},
	}
	_, s.StoreFull = r.pauses.room.isFull()
	for _, l := range r.runs.serving() {
		h := r.pauses.of(l)
		p := h.Pause()
		s.Runs[l.run] = RunStats{Pulling: p.Pulls, Paused: p.Reason, TailHold: h.TailHold, HintHold: h.HintHold,
			InFlight: int(l.n.held.Load()), TokensStreamed: l.n.tokens.Load(), Turns: l.n.turns.Load(),
			Completed: l.n.completed.Load(), DeadLettered: l.n.deadLettered.Load(), Retry: l.n.retried.Load(),
			HandedBack: l.n.handedBack.Load(), TailHandedBack: l.n.tailHandedBack.Load(), AlreadySettled: l.n.alreadySettled.Load()}
		s.TokensStreamed += l.n.tokens.Load()
		s.Completed += l.n.completed.Load()
		s.DeadLettered += l.n.deadLettered.Load()
		s.Retry += l.n.retried.Load()
		s.HandedBack += l.n.handedBack.Load()
		s.TailHandedBack += l.n.tailHandedBack.Load()
		s.AlreadySettled += l.n.alreadySettled.Load()
		s.Turns += l.n.turns.Load()
		s.Hedges += l.n.hedges.Load()
		s.HedgesWon += l.n.hedgesWon.Load()
		s.HedgedAway += l.n.hedgedAway.Load()
		s.HedgedTokens += l.n.hedgedTokens.Load()
		s.TailHolds += l.tailHolds.Load()
		s.ConsumerFull = s.ConsumerFull || l.consumerFull.Load()
	}
	return s
}

package policy

import "github.com/aerie-dev/aerie/schema"

// "Is this worker, or this run, paused?" is answered by Holds.Pause, from
// the eight things that keep a worker from pulling a run's prompts. The
// pull loop, the heartbeats, the metrics and Stats all ask it.

// Holds are what may keep a worker from pulling one run's prompts: the
// worker's own state, then the run's.
type Holds struct {
	// Stopping: the worker is shutting down.
	Stopping bool
	// Breaker is why the worker's backend is down for it (its breaker is
	// open), "" while it is up.
	Breaker string
	// StoreFull: the JetStream store has no room for its results.
	StoreFull bool
	// DiskFull is why the disk a run's hidden-states files go to has no
	// room for the next sample, "" while it has.
	DiskFull string
	// RunPaused: the run is paused (aerie runs pause); RunGone: its
	// manifest was deleted.
	RunPaused, RunGone bool
	// RunLacks is why the worker leaves the run alone: the run needs a
	// feature it lacks (schema.LackError); "" otherwise.
	RunLacks string
	// TailHold: the worker holds back near the end of the run, for
	// faster workers; HintHold: from prompts whose length hints are too
	// long for its server.
	TailHold, HintHold bool
}

// Pause is what a worker's holds come to for one run.
type Pause struct {
	// Pulls is set while nothing holds the worker from the run.
	Pulls bool
	// Paused is set while the worker or the run is stopped (the holds
	// but the tail and the hint hold), and Reason says why, as
	// heartbeats and status show it.
	Paused bool
	Reason string
}

// StoreFullReason is the paused reason of a worker whose results the
// JetStream store has no room for.
const StoreFullReason = "JetStream store full: results cannot be stored; the answers are kept and stored once there is room (remove an old run with aerie runs rm, or raise the server's max_file_store)"

// RunGoneReason is the paused reason of a run whose manifest is deleted.
const RunGoneReason = "run manifest deleted: no more prompts are pulled from the run; those held finish"

// With is h, the worker's own holds, with run's, one run's own.
func (h Holds) With(run Holds) Holds {
	h.RunPaused, h.RunGone, h.RunLacks, h.TailHold, h.HintHold = run.RunPaused, run.RunGone, run.RunLacks, run.TailHold, run.HintHold
	return h
}

// Pause is what h comes to: the worker pulls while nothing holds it;
// it is paused, first for stopping, then for a full store, then for its
// backend, then for the run's own state.
func (h Holds) Pause() Pause {
	p := Pause{Paused: true}
	switch {
	case h.Stopping:
		p.Reason = schema.PausedStopping
	case h.StoreFull:
		p.Reason = StoreFullReason
	case h.DiskFull != "":
		p.Reason = h.DiskFull
	case h.Breaker != "":
		p.Reason = h.Breaker
	case h.RunGone:
		p.Reason = RunGoneReason
	case h.RunLacks != "":
		p.Reason = h.RunLacks
	case h.RunPaused:
		p.Reason = schema.PausedRun
	default:
		p.Paused = false
	}
	p.Pulls = !p.Paused && !h.TailHold && !h.HintHold
	return p
}

package throughput

import (
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// phase names where the run is, from counts at the time of a snapshot.
//
//   - done: every line is completed or failed (an empty run is done from
//     the start);
//   - draining: completed, failed and in-flight lines cover the run, so
//     nothing is left to hand out and the batch empties;
//   - waiting: nothing in flight and nothing finished in this process;
//   - ramp-up, until the first wave has turned over: this process has
//     finished as many requests as the live workers' windows hold
//     (requests written, lines failed, and the finished turns of
//     conversations still held, interim). Until then every slot is still
//     on its first request and the finished ones are the shortest of
//     that wave, so completion counts and mean lengths are biased low.
//     Once each slot has, on average, finished a request, the set of
//     finished answers includes long ones and the completion rate
//     approaches what the backends sustain;
//   - steady otherwise.
//
// The ramp-up to steady change is latched: a worker that restarts later
// refills its own window, but the run as a whole does not start over.
// Draining can return to steady if a worker dies and its prompts go back
// to be handed out again.
func (e *Estimator) phase(now time.Time, inFlight, windows, interim int) schema.Phase {
	finished := e.completed + e.failed
	if !e.steady {
		wave := windows
		if wave <= 0 {
			wave = inFlight
		}
		if wave > 0 && e.localRequests+e.localFailed+interim >= wave {
			e.steady, e.steadySince = true, now
		}
	}
	switch {
	case finished >= e.cfg.Total:
		return schema.PhaseDone
	case finished+inFlight >= e.cfg.Total:
		return schema.PhaseDraining
	case e.steady:
		return schema.PhaseSteady
	case inFlight == 0 && e.localRequests == 0 && e.localFailed == 0:
		return schema.PhaseWaiting
	default:
		return schema.PhaseRampUp
	}
}

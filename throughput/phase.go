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
// to be handed out again, but not for a few lines short of covering the
// run: a heartbeat is up to one interval older than the written lines,
// and a prompt its worker has answered and let go of is neither in
// flight nor written until the aggregator has its result. A tenth of
// the lines left (at least one) is taken to be such answers in transit;
// a dead worker's window uncovers more.
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
	left := e.cfg.Total - finished
	uncovered := left - inFlight
	e.draining = left > 0 && (uncovered <= 0 || e.draining && uncovered <= max(1, left/10))
	switch {
	case left <= 0:
		return schema.PhaseDone
	case e.draining:
		return schema.PhaseDraining
	case e.steady:
		return schema.PhaseSteady
	case inFlight == 0 && e.localRequests == 0 && e.localFailed == 0:
		return schema.PhaseWaiting
	default:
		return schema.PhaseRampUp
	}
}

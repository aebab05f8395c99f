package throughput

import (
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// SetAckWait sets Config.AckWait once the workers consumer is known.
func (e *Estimator) SetAckWait(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg.AckWait = d
}

// strandedBack is how long until the last prompts held by workers that
// went silent without stopping are back in the queue (the AckWait after
// the last heartbeat of each: its last progress ack came no later), and
// how many prompts those workers held. Zero when none is, or the AckWait
// is unknown. Call with e.mu held.
func (e *Estimator) strandedBack(now time.Time) (back time.Duration, held int) {
	if e.cfg.AckWait <= 0 {
		return 0, 0
	}
	for _, w := range e.workers {
		silent := now.Sub(w.lastHeard)
		if silent <= e.cfg.StaleAfter || w.stopping || w.inFlight == 0 || silent >= e.cfg.AckWait {
			continue
		}
		back = max(back, e.cfg.AckWait-silent)
		held += w.inFlight
	}
	return back, held
}

// holdETA puts a known ETA, and its band, no earlier than sec from now:
// the run cannot end before its stranded prompts are back and answered.
// An unknown ETA stays unknown.
func holdETA(t *schema.Throughput, sec float64) {
	if t.ETASec < 0 {
		return
	}
	t.ETASec = max(t.ETASec, sec)
	if t.ETALowSec >= 0 {
		t.ETALowSec = max(t.ETALowSec, sec)
		t.ETAHighSec = max(t.ETAHighSec, t.ETASec)
	}
}

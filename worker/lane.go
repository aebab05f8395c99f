package worker

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// lane is what a worker keeps of one run it serves: the run's manifest
// and consumer, what the run's other workers say in their heartbeats,
// and whether this worker holds back from the run's prompts. Everything
// a prompt needs of its run is reached through its delivery's lane, so
// that one worker can serve several runs side by side. The zero value is
// not usable; Worker.openLane makes one.
type lane struct {
	run      string
	manifest *schema.Manifest
	cons     jetstream.Consumer
	// ackWait and maxDeliver are the consumer's: progress acks go every
	// ackWait/3, and the last delivery of a prompt is never handed back.
	ackWait    time.Duration
	maxDeliver int
	// log carries the run's name.
	log *slog.Logger
	// peers are the run's other workers, heard from their heartbeats.
	peers peers
	// tailHold is set while this worker holds back from the run's prompts
	// for the tail, and tailHolds counts the times it began to
	// (tailhold.go); consumerFull is set while the run's consumer has
	// been found full with prompts waiting and this worker's slots free
	// (ackroom.go).
	tailHold     atomic.Bool
	tailHolds    atomic.Int64
	consumerFull atomic.Bool
	// hintLimit is the longest length hint this worker starts (float64
	// bits, +Inf for none), and hintHold is set while the prompt next in
	// the run's queue is above it: see hintlimit.go.
	hintLimit atomic.Uint64
	hintHold  atomic.Bool
	// hintBounced is set when a prompt was handed back for its hint since
	// the last decision. peekAfter is when the pull decision next reads
	// the hints left in the run's queue, set when a reading found none;
	// only the decision's goroutine uses it.
	hintBounced atomic.Bool
	peekAfter   time.Time
	// pending is the run's prompts left to deliver as last read from its
	// consumer, -1 before; hedges are the hedges this worker runs for
	// the run, by prompt sequence, and hedgedBy the requests of its own
	// that another worker hedges, by sequence (hedge.go); lengths keeps
	// the run's answer lengths, from which a request's is expected, and
	// hintErr its answers' lengths over their length hints, from which
	// the hints' error is known (hintlimit.go).
	// cameBack counts deliveries of prompts delivered before (attempt
	// above 1): a dead worker's, a hand-back's, a retry's.
	cameBack atomic.Int64
	pending  atomic.Int64
	hedges   sync.Map // uint64 -> *hedge
	hedgedBy sync.Map // uint64 -> worker name
	lengths  sample[int]
	hintErr  sample[float64]
	// n counts what the worker did for the run.
	n laneCounts
	// sched is the run's schedule as last read from its manifest (nil:
	// the zero schedule); gone is set once the run's manifest is deleted:
	// nothing more is pulled, and what is held finishes.
	sched atomic.Pointer[schema.Schedule]
	gone  atomic.Bool
	// beat is what the heartbeats goroutine remembers of the run.
	beat struct {
		tokens int64
		quiet  int
	}
}

// schedule is the run's schedule now.
func (l *lane) schedule() schema.Schedule {
	if s := l.sched.Load(); s != nil {
		return *s
	}
	return schema.Schedule{}
}

// laneCounts are a worker's counters for one run: its heartbeats for the
// run carry them, and Stats sums them over the runs.
type laneCounts struct {
	// tokens counts completion tokens streamed, those of requests that
	// later failed included; turns the answers generated and kept.
	tokens, turns atomic.Int64
	completed     atomic.Int64
	deadLettered  atomic.Int64
	retried       atomic.Int64
	// handedBack counts prompts handed back during outages, and
	// tailHandedBack those handed back at the end of the run for an idle
	// worker (tail.go).
	handedBack, tailHandedBack atomic.Int64
	// alreadySettled counts redelivered prompts settled with the outcome
	// an earlier delivery stored, without generating them again.
	alreadySettled atomic.Int64
	// hedges counts the hedges sent, hedgesWon those stored first, and
	// hedgedTokens the tokens generated twice that this worker threw
	// away; hedgedAway counts the prompts settled because a hedge
	// elsewhere stored their answer first (hedge.go).
	hedges, hedgesWon, hedgedTokens, hedgedAway atomic.Int64
	// interimTurns counts the stored turns of the conversations held.
	interimTurns atomic.Int64
	// held counts the run's prompts delivered and not yet settled, and
	// active those of them whose generation is not over.
	held, active atomic.Int64
	// meanTokens is a moving mean of the run's answers' completion
	// tokens (float64 bits; 0 before the first), which the scheduler
	// charges a run for each prompt it starts (schedule.go).
	meanTokens atomic.Uint64
}

// addAnswer counts an answer of n completion tokens into the moving mean.
func (c *laneCounts) addAnswer(n int) {
	for {
		old := c.meanTokens.Load()
		m := math.Float64frombits(old)
		next := float64(n)
		if m > 0 {
			next = m + meanTokensWeight*(float64(n)-m)
		}
		if c.meanTokens.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// mean is the moving mean of the run's answers, 0 before the first.
func (c *laneCounts) mean() float64 { return math.Float64frombits(c.meanTokens.Load()) }

// meanTokensWeight is each answer's weight in the moving mean: about the
// last hundred count.
const meanTokensWeight = 1.0 / 100

// serving is the lanes of the runs the worker serves now, in its order;
// none before Run has started them. The slice is never changed: a lane
// added or removed replaces it.
func (w *Worker) serving() []*lane {
	if p := w.lanes.Load(); p != nil {
		return *p
	}
	return nil
}

// lastDelivery reports whether a delivery numbered attempt is the
// prompt's last: it will not be delivered again.
func (l *lane) lastDelivery(attempt int) bool {
	return l.maxDeliver > 0 && attempt >= l.maxDeliver
}

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
// whether this worker holds back from the run's prompts, and its
// counters. Everything a prompt needs of its run is reached through its
// delivery's lane, so that one worker serves several runs side by side.
// The zero value is not usable; runSet.open makes one.
type lane struct {
	// Set when the lane opens, never changed after: index is the lane's
	// place among the worker's (its flights' Lane); ackWait and
	// maxDeliver are the consumer's: progress acks go every ackWait/3,
	// and the last delivery of a prompt is never handed back; log
	// carries the run's name.
	index      int
	run        string
	manifest   *schema.Manifest
	cons       jetstream.Consumer
	ackWait    time.Duration
	maxDeliver int
	log        *slog.Logger

	// peers are the run's other workers, written by the subscription to
	// their heartbeats and read by the controller.
	peers peers

	// Written by the controller alone (apply), read by the pull loop, the
	// heartbeats, the metrics and Stats: tailHold while the worker holds
	// back from the run's prompts for the tail (tailHolds counts the times
	// it began to), hintHold while the prompt next in the queue has a hint
	// above hintLimit (float64 bits, +Inf for none; the executors read it
	// for the prompts that come, and set hintHold until the next decision
	// when they hand one back: see bounce), consumerFull while the consumer has been
	// found full with prompts waiting and this worker's slots free, and
	// pending the prompts left to deliver as last read (-1 before), which
	// the heartbeats' hedgeable list waits on.
	tailHold, hintHold, consumerFull atomic.Bool
	tailHolds                        atomic.Int64
	hintLimit                        atomic.Uint64
	pending                          atomic.Int64

	// Written by the runs watcher alone: sched is the run's schedule as
	// last read from its manifest (nil: the zero schedule); gone is set
	// once the manifest is deleted: nothing more is pulled, and what is
	// held finishes.
	sched atomic.Pointer[schema.Schedule]
	gone  atomic.Bool

	// Written by the executors: bounced when one hands a prompt back for
	// its hint (the controller takes it at its next decision), cameBack
	// counts deliveries of prompts delivered before (a dead worker's, a
	// hand-back's, a retry's), which the done watcher reports; answers
	// are the run's answer lengths, and hintErr their ratios to their
	// length hints, from which the hints' error is known.
	bounced  atomic.Bool
	cameBack atomic.Int64
	// lacks is set, once, by the first executor that meets a message
	// needing a feature this build lacks: the worker leaves the run
	// alone from then on (a run hold), and its heartbeats say why.
	lacks atomic.Pointer[schema.LackError]
	// needs checks each message\'s features (schema.HeaderNeeds).
	needs   schema.NeedsCache
	answers answerLengths
	hintErr sample[float64]

	// hedges are the hedges this worker runs for the run, by prompt
	// sequence (the hedger's), and hedgedBy the requests of its own that
	// another worker hedges, by sequence (the notice handler's, cleared
	// by the executor that settles the prompt).
	hedges   sync.Map // uint64 -> *hedge
	hedgedBy sync.Map // uint64 -> worker name

	// n counts what the worker did for the run.
	n laneCounts

	// beat is what the heartbeats goroutine, alone, remembers of the run.
	beat struct {
		tokens int64
		quiet  int
	}
}

// lack records that the run needs what le names, which this worker
// lacks: it pulls no more of the run's prompts; those it holds finish.
// Only the first is kept and logged.
func (l *lane) lack(le *schema.LackError) {
	if l.lacks.CompareAndSwap(nil, le) {
		l.log.Error("leaving the run alone: a message needs a feature this worker lacks; no more prompts are pulled from the run, those held finish, and what needs the feature is handed back uncounted",
			"lacks", le.Lacking, "written_by", le.By, "version", schema.BuildVersion(), "err", le)
	}
}

// schedule is the run's schedule now.
func (l *lane) schedule() schema.Schedule {
	if s := l.sched.Load(); s != nil {
		return *s
	}
	return schema.Schedule{}
}

// limit is the longest length hint the worker starts for the run (+Inf
// for no limit).
func (l *lane) limit() float64 { return math.Float64frombits(l.hintLimit.Load()) }

// lastDelivery reports whether a delivery numbered attempt is the
// prompt's last: it will not be delivered again.
func (l *lane) lastDelivery(attempt int) bool {
	return l.maxDeliver > 0 && attempt >= l.maxDeliver
}

// addHinted counts, for the hints' error, an answer of tokens to a
// prompt whose length hint was hint; a prompt without one (0) is not
// counted. An answer cut at max_tokens counts its length so far: a
// hint's error is known at least that large.
func (l *lane) addHinted(hint, tokens int) {
	if hint > 0 {
		l.hintErr.add(float64(tokens) / float64(hint))
	}
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
	// worker, or for a faster one.
	handedBack, tailHandedBack atomic.Int64
	// alreadySettled counts redelivered prompts settled with the outcome
	// an earlier delivery stored, without generating them again.
	alreadySettled atomic.Int64
	// hedges counts the hedges sent, hedgesWon those stored first, and
	// hedgedTokens the tokens generated twice that this worker threw
	// away; hedgedAway counts the prompts settled because a hedge
	// elsewhere stored their answer first.
	hedges, hedgesWon, hedgedTokens, hedgedAway atomic.Int64
	// interimTurns counts the stored turns of the conversations held.
	interimTurns atomic.Int64
	// held counts the run's prompts delivered and not yet settled, and
	// active those of them whose generation is not over.
	held, active atomic.Int64
}

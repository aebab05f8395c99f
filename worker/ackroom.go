package worker

// The consumer's MaxAckPending bounds the prompts delivered and not yet
// settled across all the workers of a run. A worker checks at start that
// its own share fits, but a fleet outgrows it unseen: more workers join,
// or automatic windows grow (each may hold heldPerSlot x --max-window).
// The broker then delivers nothing more until some prompt is settled,
// and servers sit with free slots while prompts wait, with no error
// anywhere. So every ackRoomPeriods heartbeats a worker with free slots
// that is pulling looks at the consumer; when it finds it full while
// prompts wait, twice running, it warns once, naming the MaxAckPending
// the windows it hears of need, and says when there is room again. The
// state (Stats.ConsumerFull, aerie_worker_consumer_full) lasts until
// the consumer is seen with room.

// ackRoomPeriods is how many heartbeat periods apart the consumer is
// looked at: the check costs one JetStream API request.
const ackRoomPeriods = 5

// ackRoomPolicy looks, when lane i's consumer is due to be looked at, for
// a full consumer (ackroom.go) and sets lp's change; it returns the new
// streak of looks that found it full. A worker looks only while it pulls
// with a free slot; a look that cannot be made ends the streak and
// leaves the state.
func ackRoomPolicy(r readings, i int, streak int, lp *lanePlan) int {
	lr := r.lanes[i]
	c := lr.consumer
	if !ackRoomLooks(r, i) || c == nil {
		return 0
	}
	if !(c.maxAckPending > 0 && c.ackPending >= c.maxAckPending && c.pending > 0) {
		if lr.consumerFull {
			lp.full, lp.consumer = fullClear, c
		}
		return 0
	}
	if streak++; streak < 2 || lr.consumerFull {
		return streak
	}
	lp.full, lp.consumer = fullSet, c
	lp.workers, lp.windows = lr.peerWorkers+1, lr.peerWindows+r.size
	lp.need = heldPerSlot * lp.windows
	if lp.need <= c.maxAckPending {
		lp.need = 2 * c.maxAckPending
	}
	return streak
}

// ackRoomLooks reports whether the worker looks at lane i's consumer for
// room: it pulls from the run and has a free slot.
func ackRoomLooks(r readings, i int) bool {
	return !r.paused && !r.lanes[i].tailHold && r.size-r.generating > 0
}

// wantsConsumer reports whether observe reads lane i's consumer: the
// tail policy needs it, or the consumers are due to be looked at for
// room and this worker looks.
func wantsConsumer(p policy, r *readings, i int, m *memory) bool {
	return tailNeedsConsumer(p, *r, i) || slowerThanOthers(r.lanes[i].others, m.speed) ||
		!r.now.Before(m.nextAck) && ackRoomLooks(*r, i)
}

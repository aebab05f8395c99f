package policy

import "time"

// The consumer's MaxAckPending bounds the prompts delivered and not yet
// settled across all the workers of a run. A worker checks at start that
// its own share fits, but a fleet outgrows it unseen: more workers join,
// or automatic windows grow (each may hold HeldPerSlot x --max-window).
// The broker then delivers nothing more until some prompt is settled,
// and servers sit with free slots while prompts wait, with no error
// anywhere. So every AckEvery a worker with free slots that is pulling
// looks at the consumer; when it finds it full while prompts wait, twice
// running, it warns once, naming the MaxAckPending the windows it hears
// of need, and says when there is room again. The state lasts until the
// consumer is seen with room.

// HeldPerSlot is how many messages a worker may hold per slot of its
// window: one generating and one being stored (or, with --turns all, a
// conversation between turns). Storing a result and acknowledging it
// takes milliseconds on a quiet broker and a few hundred under load;
// without the second message per slot, the slot would wait for it.
const HeldPerSlot = 2

// ackRoomPolicy looks, when lane i's consumer is due to be looked at, for
// a full consumer and sets lp's change; it returns the new streak of
// looks that found it full. A worker looks only while it pulls with a
// free slot; a look that cannot be made ends the streak and leaves the
// state.
func ackRoomPolicy(s Snapshot, i int, streak int, lp *LanePlan) int {
	l := s.Lanes[i]
	c := l.Consumer
	if !ackRoomLooks(s, i) || c == nil {
		return 0
	}
	if !(c.MaxAckPending > 0 && c.AckPending >= c.MaxAckPending && c.Pending > 0) {
		if l.ConsumerFull {
			lp.Full = FullClear
		}
		return 0
	}
	if streak++; streak < 2 || l.ConsumerFull {
		return streak
	}
	lp.Full = FullSet
	lp.Workers, lp.Windows = l.Peers.Workers+1, l.Peers.Windows+s.Size
	lp.Need = HeldPerSlot * lp.Windows
	if lp.Need <= c.MaxAckPending {
		lp.Need = 2 * c.MaxAckPending
	}
	return streak
}

// ackRoomLooks reports whether the worker looks at lane i's consumer for
// room: it pulls from the run (nothing holds it: see Holds.Pause) and
// has a free slot.
func ackRoomLooks(s Snapshot, i int) bool {
	return s.Pause(i).Pulls && FreeSlots(s.Size, s.Generating) > 0
}

// LaneReads says what a decision needs read of a run.
type LaneReads struct {
	// Consumer: its consumer's info. Hints: the length hints of its
	// queue (see Lane.NextHint), read only with the consumer's.
	Consumer, Hints bool
}

// Reads says, for snapshot s before its runs' consumers and queues are
// read, which the decision needs: a run's consumer when the tail policy
// needs it, when this worker is much slower than another of the run,
// or when the consumers are due to be looked at for room and this worker
// looks; its queue's hints when it is much slower, unless a reading
// found none lately. Each read is a JetStream API request.
func Reads(c Config, s Snapshot, m Memory) []LaneReads {
	out := make([]LaneReads, len(s.Lanes))
	waiting := waitingFlights(c, s)
	for i, l := range s.Lanes {
		slow := SlowerThanOthers(l.Peers.Pulling, m.Speed)
		out[i].Consumer = tailNeedsConsumer(c, s, i, len(waiting[i])) || slow || !s.Now.Before(m.NextAck) && ackRoomLooks(s, i)
		out[i].Hints = out[i].Consumer && slow && !s.Now.Before(at(m.PeekAfter, i))
	}
	return out
}

// at is ts[i], or the zero time past its end.
func at(ts []time.Time, i int) time.Time {
	if i < len(ts) {
		return ts[i]
	}
	return time.Time{}
}

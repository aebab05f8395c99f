package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

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

// watchAckRoom checks for a full consumer until ctx ends (see above).
func (w *Worker) watchAckRoom(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(ackRoomPeriods * w.cfg.Heartbeat)
	defer t.Stop()
	streak := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		full, info := w.ackRoomFull(ctx, cons)
		if !full {
			streak = 0
			if info != nil && w.consumerFull.Swap(false) {
				w.log.Info("the run's consumer has room again: the window fills",
					"ack_pending", info.NumAckPending, "max_ack_pending", info.Config.MaxAckPending)
			}
			continue
		}
		if streak++; streak < 2 || w.consumerFull.Swap(true) {
			continue
		}
		workers, windows := w.peers.windows(time.Now(), 3*w.cfg.Heartbeat)
		workers, windows = workers+1, windows+w.win.capacity()
		need := heldPerSlot * windows
		if need <= info.Config.MaxAckPending {
			need = 2 * info.Config.MaxAckPending
		}
		w.log.Warn("the run's consumer is full: as many prompts as its MaxAckPending are delivered and unsettled, so no worker gets more while prompts wait and this one has free slots",
			"consumer", info.Config.Durable, "max_ack_pending", info.Config.MaxAckPending, "ack_pending", info.NumAckPending,
			"waiting", info.NumPending, "free_slots", w.freeSlots(),
			"workers_heard", workers, "their_windows", windows,
			"fix", fmt.Sprintf("nats consumer edit %s %s --max-pending %d", schema.PromptsStream, info.Config.Durable, need))
	}
}

// freeSlots is the window's slots with no request generating.
func (w *Worker) freeSlots() int { return w.win.capacity() - int(w.generating.Load()) }

// ackRoomFull reports whether this worker, pulling with a free slot,
// finds the consumer full while prompts wait. info is nil when the
// worker did not look (no free slot, paused, holding back for the tail)
// or could not.
func (w *Worker) ackRoomFull(ctx context.Context, cons jetstream.Consumer) (bool, *jetstream.ConsumerInfo) {
	if open, _ := w.breaker.isOpen(); open || w.paused.Load() != nil || w.tailHold.Load() || w.freeSlots() <= 0 {
		return false, nil
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := cons.Info(ictx)
	if err != nil {
		return false, nil
	}
	limit := info.Config.MaxAckPending
	return limit > 0 && info.NumAckPending >= limit && info.NumPending > 0, info
}

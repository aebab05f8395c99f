package aggregator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// A run can wait for lines that will never come: its results were
// acknowledged by an aggregator that wrote them to another directory
// (another --data-dir, another host), or its files were deleted or
// replaced by an older copy after they were written, or the broker lost
// prompts. Nothing is queued, in flight or waiting to be written, and
// the run stays short of its total for ever, with idle workers and an
// aggregator that looks merely patient. So an aggregator with lines
// missing and nothing held by any worker looks, unwrittenLook apart, at
// the consumers that could still bring them; when two looks running
// find all of them empty, it says which files lack how many lines and
// how to get them back, in a warning and in its events (Unwritten),
// until lines come again.

// unwrittenLook is the least time between two looks at the consumers.
// Two looks this far apart outlast the moment between a prompt's
// acknowledgement and its result's delivery to the aggregator.
var unwrittenLook = 10 * time.Second

// unwritten is the event loop's memory of the looks; used by the event
// loop only.
type unwritten struct {
	// lastLook is when the consumers were last looked at; zero when the
	// run last looked like it was progressing.
	lastLook time.Time
	// found counts the looks in a row that found nothing to come, and
	// accounted the run's lines then; warned is set once it is said.
	found     int
	accounted int
	warned    bool
}

// noteUnwritten sets s.Unwritten when the run lacks lines that nothing
// will bring (see above).
func (a *Aggregator) noteUnwritten(ctx context.Context, s *schema.Throughput, now time.Time) {
	u := &a.unwritten
	missing := s.Total - s.Completed - s.Failed
	if s.Phase == schema.PhaseDone || missing <= 0 || s.InFlight > 0 || s.Stranded > 0 || s.Completed+s.Failed != u.accounted {
		if u.warned && missing > 0 {
			a.log.Info("lines are written again; the run's missing lines may yet come", "completed", s.Completed, "failed", s.Failed, "total", s.Total)
		}
		*u = unwritten{accounted: s.Completed + s.Failed}
		return
	}
	if !u.lastLook.IsZero() && now.Sub(u.lastLook) < unwrittenLook {
		if u.found >= 2 {
			s.Unwritten = missing
		}
		return
	}
	u.lastLook = now
	empty, err := a.nothingToCome(ctx)
	if err != nil {
		a.log.Debug("cannot look at the run's consumers for lines to come", "err", err)
		u.found = 0
		return
	}
	if !empty {
		u.found = 0
		return
	}
	if u.found++; u.found < 2 {
		return
	}
	s.Unwritten = missing
	if u.warned {
		return
	}
	u.warned = true
	a.log.Warn(fmt.Sprintf("run %s: %d of its %d lines are not in %s and nothing will bring them: no prompt is queued or in flight and no result or dead letter waits to be written. "+
		"An aggregator acknowledged them and wrote them to another directory (check --data-dir), or the files were deleted or replaced after they were written, or the broker lost prompts, or aerie produce has not finished queuing them. "+
		"To write the files again from the streams: stop this aggregator, run `nats consumer rm %s %s -f` and `nats consumer rm %s %s -f`, and start it again; "+
		"to queue again what the streams do not hold either: aerie reconcile --run %s --prompts FILE --data-dir %s",
		a.cfg.Run, missing, s.Total, a.dir, schema.ResultsStream, schema.ResultsConsumer(a.cfg.Run), schema.DeadStream, schema.DeadConsumer(a.cfg.Run),
		a.cfg.Run, filepath.Dir(a.dir)),
		"completed", s.Completed, "failed", s.Failed, "total", s.Total, "unwritten", missing)
}

// nothingToCome reports whether every consumer that could bring a line
// of the run is empty: no prompt queued or unacknowledged, and no result,
// dead letter or max-deliveries advisory waiting to be delivered or
// acknowledged. A consumer that does not exist counts as not empty: the
// producer or the aggregator has yet to create it.
func (a *Aggregator) nothingToCome(ctx context.Context) (bool, error) {
	for _, c := range []struct{ stream, name string }{
		{schema.PromptsStream, schema.WorkersConsumer(a.cfg.Run)},
		{schema.ResultsStream, schema.ResultsConsumer(a.cfg.Run)},
		{schema.DeadStream, schema.DeadConsumer(a.cfg.Run)},
		{schema.AdvisoriesStream, schema.AdvisoriesConsumer(a.cfg.Run)},
	} {
		info, err := a.consumerInfo(ctx, c.stream, c.name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("consumer %s of stream %s: %w", c.name, c.stream, err)
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return false, nil
		}
	}
	return true, nil
}

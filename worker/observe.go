package worker

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// observe takes the snapshot of now for a decision with memory m: one
// look at the window, the requests in flight, the runs and their other
// workers, and the pauses. The backend's load is read when the window is
// automatic and has not fallen back to a fixed one, or the worker yields
// to serving traffic; a run's consumer, and the hints in its queue, only
// when the decision needs them (policy.Reads), since each read is a
// JetStream API request.
func (c *controller) observe(ctx context.Context, m policy.Memory) policy.Snapshot {
	s := policy.Snapshot{Now: time.Now(), Generating: int(c.requests.generating.Load())}
	s.Size, s.Taken, s.Pulling = c.slots.State()
	s.Holds = c.pauses.worker()
	if c.cfg.YieldToServing || c.cfg.AutoWindow && !m.Load.Fixed {
		s.Load = c.readLoad(ctx)
	}
	s.Pace = c.requests.pace.reading()
	lanes := c.runs.serving()
	for _, l := range lanes {
		s.Pace.Tokens += l.n.tokens.Load()
	}
	s.Flights = c.flights.Snapshot()
	recent := 3 * c.cfg.Heartbeat
	s.Lanes = make([]policy.Lane, len(lanes))
	for i, l := range lanes {
		sl := &s.Lanes[i]
		ours := func(seq uint64) bool { _, ok := l.hedges.Load(seq); return ok }
		sl.MaxDeliver = l.maxDeliver
		sl.Peers = l.peers.view(s.Now, recent, ours)
		sl.Holds, sl.ConsumerFull = l.holds(), l.consumerFull.Load()
		sl.HintError = policy.HintError(l.hintErr.sorted())
		sl.NextHint = -1
		sl.Bounced = l.bounced.Swap(false)
		if c.cfg.HedgeOff {
			sl.Peers.Hedgeable = nil
			continue
		}
		sl.Hedges = countHedges(l)
		if len(sl.Peers.Hedgeable) > 0 {
			sl.Lengths, _ = l.answers.sample.sorted()
		}
	}
	for i, r := range policy.Reads(c.policy, s, m) {
		if !r.Consumer {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := lanes[i].cons.Info(ictx)
		cancel()
		if err != nil {
			continue
		}
		k := &policy.Consumer{Durable: info.Config.Durable, Pending: info.NumPending,
			AckPending: info.NumAckPending, MaxAckPending: info.Config.MaxAckPending,
			Delivered: info.Delivered.Stream, Filter: info.Config.FilterSubject}
		if len(info.Config.FilterSubjects) == 1 {
			k.Filter = info.Config.FilterSubjects[0]
		}
		s.Lanes[i].Consumer = k
		if r.Hints {
			s.Lanes[i].NextHint, s.Lanes[i].MeanHint = c.queueHints(ctx, k)
		}
	}
	return s
}

// readLoad reads the backend's load once, within one poll interval.
func (c *controller) readLoad(ctx context.Context) policy.LoadReading {
	mr, ok := c.backend.(metricsReader)
	if !ok {
		return policy.LoadReading{Err: errors.New(policy.NoMetricsReader), NotServed: true, NoReader: true}
	}
	rctx, cancel := context.WithTimeout(ctx, max(c.cfg.WindowPoll, time.Second))
	defer cancel()
	text, err := mr.ServerMetrics(rctx)
	var load policy.Load
	if err == nil {
		load, err = parseLoad(text, c.cfg.LoadMetrics)
	}
	if err != nil {
		var apiErr *openai.APIError
		notServed := errors.Is(err, errNoLoadMetrics) || errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound
		return policy.LoadReading{Err: err, NotServed: notServed}
	}
	return policy.LoadReading{Load: &load}
}

// queueSamples is how many prompts left in a run's queue queueHints
// reads: enough for their mean hint to within about a third on a heavy
// tail, few enough to read every decision.
const queueSamples = 8

// queueHints reads the length hints of prompts that consumer k has still
// to deliver: next is the hint of the one it delivers next, redeliveries
// aside (the first message after the last delivered on its filter
// subject), and mean the mean hint of queueSamples prompts spread evenly
// from it over the stream sequences of those left (as if the run's
// prompts were stored together), as far as they have hints. It returns
// -1 and 0 when it cannot tell (no single filter, nothing left, reads
// that fail), and a next of 0 for a prompt without a hint.
func (c *controller) queueHints(ctx context.Context, k *policy.Consumer) (next int, mean float64) {
	if k.Filter == "" || k.Pending == 0 || c.store.prompts == nil {
		return -1, 0
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, first, err := c.store.promptAtOrAfter(gctx, k.Delivered+1, k.Filter)
	if err != nil {
		return -1, 0
	}
	next = p.LengthHint
	var sum, n float64
	for i := range uint64(queueSamples) {
		if i > 0 {
			if k.Pending < queueSamples {
				break
			}
			if p, _, err = c.store.promptAtOrAfter(gctx, first+i*k.Pending/queueSamples, k.Filter); err != nil {
				break // past the run's last prompt, or a read that fails
			}
		}
		if p.LengthHint > 0 {
			sum += float64(p.LengthHint)
			n++
		}
	}
	if n > 0 {
		mean = sum / n
	}
	return next, mean
}

package worker

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

// The worker decides what to pull in three steps, every WindowPoll:
// observe takes one snapshot of everything the decision depends on
// (readings), planPulls turns it into a plan with pure policies (plan.go),
// and apply carries the plan out (apply.go), the only writer of the
// window's size, the lanes' holds and the tail's hand-backs. The pull
// loop asks one place, admit, whether and from which lane it may pull.

// readings is one look at the worker, its backend and its runs.
type readings struct {
	now time.Time
	// size is the window's size and taken its slots in use (more than
	// size after a resize down); generating counts the requests at the
	// backend; pulling is set while a pull has messages outstanding.
	size, taken, generating int
	pulling                 bool
	// paused is set while the breaker is open or the worker stops.
	paused bool
	// load is the backend's own load when it was read (AutoWindow), nil
	// otherwise; loadErr is why it could not be read, and loadNotServed
	// says the backend serves no vLLM load metrics at all.
	load          *backendLoad
	loadErr       error
	loadNotServed bool
	// ownLatency is the moving mean of this worker's request times;
	// handBackWait is how long a request must have waited without a first
	// token to be handed back at the end of a run: Config.HandBackAfter,
	// or ttfFactor times the backend's shortest time to first token seen
	// (leastTTFT) if that is longer.
	ownLatency, handBackWait time.Duration
	leastTTFT                time.Duration
	// tokens is the completion tokens this worker has streamed, and
	// decoding the requests streaming now: its own speed per request
	// comes from them (hintPolicy).
	tokens   int64
	decoding int
	// firstSpeed is what the requests streaming now streamed a second
	// each since they were sent (0 for none): the speed's first measure.
	firstSpeed float64
	// flights are the requests in flight, as one look saw them: every
	// choice of requests in a decision is made from it.
	flights []flightView
	// lanes are the runs served, in the worker's order.
	lanes []laneReading
}

// laneReading is what is known of one run now.
type laneReading struct {
	lane *lane
	// others are the run's other workers that pull, heard from within
	// three heartbeats; peersFree is the free slots of all those heard,
	// and peerWorkers and peerWindows count them and sum their windows.
	others                   []tailPeer
	peersFree                int
	peerWorkers, peerWindows int
	// waiting are the run's requests that have waited handBackWait
	// without a first token and may be handed back (not last deliveries).
	waiting []waitingFlight
	// tailHold and consumerFull are the lane's state as last applied.
	tailHold, consumerFull bool
	// consumer is the run's consumer as read this time; nil when it was
	// not read (the decision did not need it) or could not be.
	consumer *consumerReading
	// hedgeable are the other workers' requests that may be hedged, less
	// those this worker hedges already (hedges counts them); lengths is
	// the run's answer lengths, sorted, read only when some are listed.
	hedgeable []peerFlight
	hedges    int
	lengths   []int
	// hintError is this worker's hints' error for the run (HintError),
	// 0 until it has answered enough hinted prompts; nextHint is the
	// length hint of the prompt next in the run's queue and meanHint the
	// mean of the hints left in it (queueHints), read only while this
	// worker is much slower than another (-1 and 0: not read).
	hintError float64
	nextHint  int
	meanHint  float64
	// bounced is set when a prompt was handed back for its hint since
	// the last readings.
	bounced bool
}

// consumerReading is what the decision uses of a consumer's info.
type consumerReading struct {
	durable                   string
	pending                   uint64
	ackPending, maxAckPending int
	// delivered is the last stream sequence delivered, and filter the
	// consumer's one filter subject ("" for none or several): the next
	// prompt it delivers, redeliveries aside, is the first after
	// delivered on filter.
	delivered uint64
	filter    string
}

// observe takes the readings of now. The backend's load is read when the
// window is automatic and has not fallen back to a fixed one; a run's
// consumer is read only when the decision needs it (see wantsConsumer),
// since each read is a JetStream API request.
func (w *Worker) observe(ctx context.Context, m *memory) readings {
	r := readings{now: time.Now(), generating: int(w.generating.Load())}
	r.size, r.taken, r.pulling = w.win.state()
	open, _ := w.breaker.isOpen()
	full, _ := w.room.isFull()
	r.paused = open || full || w.paused.Load() != nil
	if w.cfg.YieldToServing || w.cfg.AutoWindow && !m.load.fixed {
		if mr, ok := w.backend.(metricsReader); ok {
			load, err := w.readLoad(ctx, mr)
			if err != nil {
				var apiErr *openai.APIError
				r.loadErr = err
				r.loadNotServed = errors.Is(err, errNoLoadMetrics) || errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound
			} else {
				r.load = &load
			}
		} else {
			r.loadErr, r.loadNotServed = errCannotReadMetrics, true
		}
	}
	r.ownLatency = w.latency.get()
	r.leastTTFT = w.ttfts.least()
	r.handBackWait = max(w.cfg.HandBackAfter, ttfFactor*r.leastTTFT)
	for _, l := range w.serving() {
		r.tokens += l.n.tokens.Load()
	}
	r.flights = w.lookAtFlights()
	r.decoding, r.firstSpeed = streaming(r.flights, r.now)
	recent := 3 * w.cfg.Heartbeat
	lanes := w.serving()
	r.lanes = make([]laneReading, len(lanes))
	var waiting map[*lane][]waitingFlight
	if w.cfg.HandBackAfter > 0 {
		waiting = waitingFlights(r.flights, r.now.Add(-r.handBackWait))
	}
	for i, l := range lanes {
		lr := &r.lanes[i]
		lr.lane = l
		lr.others = l.peers.pulling(r.now, recent)
		lr.peersFree = l.peers.free(r.now, recent)
		lr.peerWorkers, lr.peerWindows = l.peers.windows(r.now, recent)
		lr.waiting = waiting[l]
		lr.tailHold, lr.consumerFull = l.tailHold.Load(), l.consumerFull.Load()
		lr.hintError = hintError(l.hintErr.sorted())
		lr.nextHint = -1
		lr.bounced = l.hintBounced.Swap(false)
		if !w.cfg.HedgeOff {
			for _, f := range l.peers.hedgeable(r.now, recent) {
				if _, ours := l.hedges.Load(f.Seq); !ours {
					lr.hedgeable = append(lr.hedgeable, f)
				}
			}
			lr.hedges = countHedges(l)
			if len(lr.hedgeable) > 0 {
				lr.lengths, _ = l.lengths.sorted()
			}
		}
	}
	p := w.policy()
	for i, l := range lanes {
		if !wantsConsumer(p, &r, i, m) {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := l.cons.Info(ictx)
		cancel()
		if err != nil {
			continue
		}
		c := &consumerReading{durable: info.Config.Durable, pending: info.NumPending,
			ackPending: info.NumAckPending, maxAckPending: info.Config.MaxAckPending,
			delivered: info.Delivered.Stream, filter: info.Config.FilterSubject}
		if len(info.Config.FilterSubjects) == 1 {
			c.filter = info.Config.FilterSubjects[0]
		}
		r.lanes[i].consumer = c
		if slowerThanOthers(r.lanes[i].others, m.speed) && !r.now.Before(l.peekAfter) {
			lr := &r.lanes[i]
			lr.nextHint, lr.meanHint = w.queueHints(ctx, c)
			if lr.nextHint == 0 && lr.meanHint == 0 {
				// No hints in this run, as far as a sample tells: look
				// again later, not at every decision.
				l.peekAfter = r.now.Add(hintlessPeekEvery * w.cfg.WindowPoll)
			}
		}
	}
	return r
}

// flightView is one request in flight as a decision's look saw it.
type flightView struct {
	f    *flight
	lane *lane
	// key is where the request is kept in Worker.inFlight.
	key any
	// state, tokens and sent are the flight's at the look.
	state  int32
	tokens int64
	sent   time.Time
}

// lookAtFlights is one look at the requests in flight.
func (w *Worker) lookAtFlights() []flightView {
	var out []flightView
	w.inFlight.Range(func(k, v any) bool {
		f := v.(*flight)
		fv := flightView{f: f, lane: f.lane, key: k, state: f.state.Load(), tokens: f.tokens.Load()}
		f.mu.Lock()
		if f.cancel != nil {
			fv.sent = f.sent
		}
		f.mu.Unlock()
		out = append(out, fv)
		return true
	})
	slices.SortFunc(out, func(a, b flightView) int { return compareKeys(a.key, b.key) })
	return out
}

// compareKeys orders the keys of Worker.inFlight by prompt sequence,
// then a delivery's own request, its samples' and a hedge's, so that a
// look sees the requests in the same order whatever the map's.
func compareKeys(a, b any) int {
	seqA, kindA, sampleA := keyOrder(a)
	seqB, kindB, sampleB := keyOrder(b)
	return cmp.Or(cmp.Compare(seqA, seqB), cmp.Compare(kindA, kindB), cmp.Compare(sampleA, sampleB))
}

func keyOrder(k any) (seq uint64, kind, sample int) {
	switch k := k.(type) {
	case uint64:
		return k, 0, 0
	case sampleKey:
		return k.seq, 1, k.sample
	case hedgeKey:
		return uint64(k), 2, 0
	}
	return 0, 3, 0
}

// streaming returns how many of flights are streaming, and what these
// streamed a second each since they were sent (0 for none): a first
// measure of the worker's speed, before two readings can be compared.
func streaming(flights []flightView, now time.Time) (decoding int, speed float64) {
	var streamed int64
	var since time.Duration
	for _, f := range flights {
		if f.state != flightStreaming {
			continue
		}
		decoding++
		if f.tokens > 0 && !f.sent.IsZero() && now.After(f.sent) {
			streamed += f.tokens
			since += now.Sub(f.sent)
		}
	}
	if since > 0 {
		speed = float64(streamed) / since.Seconds()
	}
	return decoding, speed
}

// errCannotReadMetrics says the backend has no way to read its server's
// metrics.
var errCannotReadMetrics = errors.New("the backend cannot read its server's metrics")

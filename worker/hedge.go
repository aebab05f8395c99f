package worker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/flights"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// At the end of a run on a mixed fleet, a long answer that a slow server
// started holds the whole run at that server's speed while the fast
// servers sit idle; no order of the queue can prevent it when lengths are
// not known. Hedging sends such a request a second time: once the run
// has nothing left to deliver, a worker with free slots reads the
// heartbeats of the run's other workers, which then list the requests
// they generate (schema.Heartbeat.Hedgeable), and sends again, from the
// prompts stream, those policy.HedgePolicy finds worth it. The first
// answer stored wins (the results stream keeps one per subject); the
// winner says so on schema.HedgeSubject, and the other copy is
// cancelled. The original's worker acknowledges its prompt as answered.
// A notice lost costs only GPU time: the copy that finishes second finds
// the answer stored and is dropped.
//
// Requests that have no token yet are left to the tail hand-back, which
// gives them back unstarted; conversations (--turns all) are never
// hedged.

// errHedgeLost ends a hedge whose original stored its answer first.
var errHedgeLost = errors.New("hedge cancelled: the original request stored its answer first")

// hedger sends this worker's hedges and follows its runs' hedge notices.
// The controller starts hedges, the notice handlers cancel them, and Run
// waits for them. The zero value is not usable; New makes it.
type hedger struct {
	// name is the worker's.
	name     string
	link     *link
	slots    *window.Window
	flights  *flights.Registry
	exec     *executor
	store    *store
	metrics  *metrics
	pullWait time.Duration

	// running counts the hedges running, which Run waits for as it does
	// for the deliveries.
	running sync.WaitGroup
	// root is what hedges run under: Run's own context, which ends as the
	// worker begins to stop (a hedge is never worth the grace period);
	// nil before Run. Under mu.
	mu   sync.Mutex
	root context.Context
}

// hedge is a hedge running on this worker.
type hedge struct {
	cancel context.CancelCauseFunc
}

// setRoot sets the context hedges run under.
func (h *hedger) setRoot(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.root = ctx
}

// start sends a hedge of each of fs. Each takes a window slot for as
// long as it generates, ahead of any pull, as a conversation's next turn
// does: at the end of a run the slots not generating are mostly held by
// a pull waiting on the empty stream, which gives them back within
// PullWait. A hedge that gets no slot by then is not sent.
func (h *hedger) start(l *lane, fs []policy.PeerFlight) {
	h.mu.Lock()
	ctx := h.root
	h.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	started := 0
	for _, f := range fs {
		if _, running := l.hedges.Load(f.Seq); running {
			continue
		}
		hctx, cancel := context.WithCancelCause(ctx)
		l.hedges.Store(f.Seq, &hedge{cancel: cancel})
		h.running.Add(1)
		started++
		go func() {
			defer h.running.Done()
			defer cancel(nil)
			defer l.hedges.Delete(f.Seq)
			sctx, stop := context.WithTimeout(hctx, 2*h.pullWait)
			err := h.slots.AcquireTurn(sctx)
			stop()
			if err != nil {
				return
			}
			defer h.slots.Release()
			h.run(hctx, l, f)
		}()
	}
	if started > 0 {
		l.log.Info("hedging requests of slower workers at the end of the run", "hedges", started, "running", countHedges(l))
	}
}

// countHedges is how many hedges of l run now.
func countHedges(l *lane) int {
	n := 0
	l.hedges.Range(func(_, _ any) bool { n++; return true })
	return n
}

// run sends the hedge of f and stores its answer if it is the first.
func (h *hedger) run(ctx context.Context, l *lane, f policy.PeerFlight) {
	log := l.log.With("id", f.ID, "hedge_of", f.Worker)
	if f.Sample > 0 {
		log = log.With("sample", f.Sample)
	}
	p, err := h.store.readPrompt(ctx, f.Seq)
	if err != nil || p.ID != f.ID || p.Sample != f.Sample || p.Run != l.run {
		if err == nil {
			err = errors.New("the stream holds another prompt at that sequence")
		}
		log.Debug("cannot read the prompt to hedge; not hedged", "seq", f.Seq, "err", err)
		return
	}
	j := newJob(l, p)
	if j.all || p.SampleCount() > 1 {
		return
	}
	if res, err := h.store.result(ctx, l.run, p.Unit()); err != nil || res != nil {
		return // answered already, or the stream cannot tell: not worth a copy
	}
	h.announce(l, schema.HedgeStarted, f.Seq, p.Unit())
	l.n.hedges.Add(1)
	fl := &flights.Flight{Key: policy.FlightKey{Seq: f.Seq, Kind: policy.HedgeOf}, Lane: l.index, Unit: p.Unit(), Hint: p.LengthHint, Attempt: 1, Last: true}
	t, err := h.exec.ask(ctx, j, 0, j.messages(), fl)
	if err != nil {
		l.n.hedgedTokens.Add(fl.Tokens())
		if errors.Is(context.Cause(ctx), errHedgeLost) {
			h.metrics.hedged(l.run, HedgeLost, fl.Tokens())
			log.Debug("hedge cancelled: the original's answer was stored first", "tokens", fl.Tokens())
			return
		}
		h.metrics.hedged(l.run, HedgeFailed, fl.Tokens())
		if ctx.Err() == nil {
			log.Info("hedge failed; the original goes on", "err", err)
		}
		return
	}
	j.turns = append(j.turns, t)
	r := j.result(1, h.name)
	r.Hedged = true
	ours, err := h.store.putResult(ctx, r, p.Unit(), l.manifest.Needs)
	tokens := int64(r.CompletionTokens)
	switch {
	case err != nil:
		l.n.hedgedTokens.Add(tokens)
		h.metrics.hedged(l.run, HedgeFailed, tokens)
		log.Warn("cannot store a hedge's answer; the original goes on", "err", err)
	case ours:
		l.n.hedgesWon.Add(1)
		l.n.completed.Add(1)
		h.metrics.hedged(l.run, HedgeWon, 0)
		h.metrics.settled(l.run, completedOutcome(j))
		h.announce(l, schema.HedgeWon, f.Seq, p.Unit())
		log.Debug("hedge answered first", "tokens", tokens)
	default:
		l.n.hedgedTokens.Add(tokens)
		h.metrics.hedged(l.run, HedgeLost, tokens)
		log.Debug("hedge answered second: the original's answer is kept", "tokens", tokens)
	}
}

// announce tells the run's workers about a hedge of the request at seq:
// best effort, as every notice is.
func (h *hedger) announce(l *lane, event string, seq uint64, u schema.Unit) {
	b, err := json.Marshal(schema.HedgeNotice{Run: l.run, Worker: h.name, Event: event, Seq: seq, ID: u.ID, Sample: u.Sample})
	if err == nil {
		err = h.link.nc.Publish(schema.HedgeSubject(l.run, h.name), b)
	}
	if err != nil {
		l.log.Debug("cannot announce a hedge", "event", event, "err", err)
	}
}

// heard returns the handler of l's hedge notices, this worker's own left
// out: a hedge started of one of its requests marks it, so that its
// answer, stored first, is announced; an answer stored first elsewhere
// cancels the copy here, the request or the hedge.
func (h *hedger) heard(l *lane) nats.MsgHandler {
	return func(m *nats.Msg) {
		var n schema.HedgeNotice
		if json.Unmarshal(m.Data, &n) != nil || n.Worker == h.name || n.Run != l.run {
			return
		}
		key := policy.FlightKey{Seq: n.Seq}
		switch n.Event {
		case schema.HedgeStarted:
			if h.flights.Holds(key, l.index) {
				l.hedgedBy.Store(n.Seq, n.Worker)
			}
		case schema.HedgeWon:
			if v, ok := l.hedges.Load(n.Seq); ok {
				v.(*hedge).cancel(errHedgeLost)
			}
			unit := schema.Unit{ID: n.ID, Sample: n.Sample}
			ours := func(f *flights.Flight) bool { return f.Lane == l.index && f.Unit == unit }
			if tokens, ok := h.flights.Cancel(key, ours, policy.FlightHedgedAway, policy.ErrHedgeWon, policy.FlightWaiting, policy.FlightStreaming); ok {
				l.n.hedgedTokens.Add(tokens)
				h.metrics.hedged(l.run, "", tokens)
			}
		}
	}
}

// follow follows, until ctx ends, the hedge notices of l's run.
func (h *hedger) follow(ctx context.Context, l *lane) {
	sub, err := h.link.nc.Subscribe(schema.HedgeFilter(l.run), h.heard(l))
	if err != nil {
		l.log.Warn("cannot follow the run's hedge notices: a hedged request runs to its end on both workers", "err", err)
		return
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
}

// hedgeable lists, for l's heartbeat, the requests of l this worker
// generates that another may hedge: none while the run still has
// prompts to deliver (as last read) or for a --turns all run; the
// oldest first, at most schema.MaxHedgeable.
func (h *hedger) hedgeable(l *lane, now time.Time) []schema.Flight {
	if l.pending.Load() != 0 || l.manifest.TurnsMode() == schema.TurnsAll {
		return nil
	}
	var out []policy.Flight
	for _, f := range h.flights.Lane(l.index) {
		if f.Key.Kind != policy.HedgeOf && !f.Group && !f.Sent.IsZero() {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b policy.Flight) int { return a.Sent.Compare(b.Sent) })
	fs := make([]schema.Flight, 0, min(len(out), schema.MaxHedgeable))
	for _, f := range out[:min(len(out), schema.MaxHedgeable)] {
		_, hedged := l.hedgedBy.Load(f.Key.Seq)
		fs = append(fs, schema.Flight{Seq: f.Key.Seq, ID: f.Unit.ID, Sample: f.Unit.Sample, Tokens: int(f.Tokens),
			ElapsedMillis: now.Sub(f.Sent).Milliseconds(), Hint: f.Hint, Hedged: hedged})
	}
	return fs
}

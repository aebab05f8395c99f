package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// At the end of a run on a mixed fleet, a long answer that a slow server
// started holds the whole run at that server's speed while the fast
// servers sit idle; no order of the queue can prevent it when lengths are
// not known. Hedging sends such a request a second time: once the run
// has nothing left to deliver, a worker with free slots reads the
// heartbeats of the run's other workers, which then list the requests
// they generate (schema.Heartbeat.Hedgeable), and sends again, from the
// prompts stream, a request of a worker at least slowFactor times slower
// per request, once it has run longer than this worker expects to take
// for the whole answer and, were the answer long, the copy would finish
// first (see longQuantile). The first answer stored wins (the results stream
// keeps one per subject); the winner says so on schema.HedgeSubject, and
// the other copy is cancelled. The original's worker acknowledges its
// prompt as answered. A notice lost costs only GPU time: the copy that
// finishes second finds the answer stored and is dropped.
//
// Requests that have no token yet are left to the tail hand-back
// (tail.go), which gives them back unstarted; conversations (--turns
// all) are never hedged.

// errHedgeWon ends a request whose answer a hedge on another worker
// stored first.
var errHedgeWon = errors.New("cancelled: a hedge of this request on a faster worker stored its answer first")

// errHedgeLost ends a hedge whose original stored its answer first.
var errHedgeLost = errors.New("hedge cancelled: the original request stored its answer first")

// flightHedgedAway is the state of a request cancelled because a hedge
// elsewhere won (see flight.state).
const flightHedgedAway int32 = flightHandedBack + 1

// hedgeKey keys a hedge's flight in Worker.inFlight, apart from the
// deliveries keyed by their sequence.
type hedgeKey uint64

// peerFlight is a request of another worker of the run, as its last
// heartbeat listed it.
type peerFlight struct {
	schema.Flight
	worker string
	// speed is that worker's tokens a second per request, age how long
	// ago its heartbeat came.
	speed float64
	age   time.Duration
}

// hedgePolicy returns the requests of lane i's other workers to hedge
// now, the most worth it first: none unless hedging is on, the run's
// consumer was read with nothing left to deliver, this worker has slots
// not generating (at most the hedge limit less its running hedges) and
// knows its own
// speed per request (own, tokens a second). A request is worth a hedge
// when its worker streams slowFactor times slower than this one, it has
// streamed a token, it has run longer than this worker expects to take
// for its whole answer (its typical length at own speed), and, should it
// be long (see expectLength), its remaining time there would be longer
// than this worker would take for all of it.
func hedgePolicy(p policy, r readings, i int, own float64, running int) []peerFlight {
	lr := r.lanes[i]
	if !p.hedge || own <= 0 || lr.consumer == nil || lr.consumer.pending > 0 || len(lr.hedgeable) == 0 {
		return nil
	}
	// The slots not generating: at the end of a run most of them are
	// held by a pull waiting on the empty stream, which a hedge takes
	// over (see startHedges).
	budget := r.size - r.generating
	if p.hedgeMax > 0 {
		budget = min(budget, p.hedgeMax-running)
	}
	if budget <= 0 {
		return nil
	}
	type candidate struct {
		f    peerFlight
		gain float64
	}
	var cs []candidate
	for _, f := range lr.hedgeable {
		if f.Hedged || f.Tokens <= 0 || f.speed <= 0 || own < slowFactor*f.speed {
			continue
		}
		done := float64(f.Tokens) + f.speed*f.age.Seconds()
		typical, long := expectLength(done, f.Hint, lr.lengths)
		ran := (time.Duration(f.ElapsedMillis)*time.Millisecond + f.age).Seconds()
		if ran < typical/own {
			continue
		}
		here, there := long/own, (long-done)/f.speed
		if there <= here {
			continue
		}
		cs = append(cs, candidate{f, there - here})
	}
	slices.SortFunc(cs, func(a, b candidate) int { return cmp.Compare(b.gain, a.gain) })
	out := make([]peerFlight, 0, min(budget, len(cs)))
	for _, c := range cs[:min(budget, len(cs))] {
		out = append(out, c.f)
	}
	return out
}

// minLengthSample is how many answers longer than a request's tokens so
// far expectLength needs to take their quantiles.
const minLengthSample = 10

// longQuantile is the quantile of the lengths above a request's tokens
// so far that a hedge is judged on. What matters at the end of a run is
// not the typical answer but the long one that would hold the run, and
// the slots a hedge takes would be idle: so a request is hedged when,
// were it as long as the longest 5% of such answers, the copy would
// finish first. The tokens generated twice for that are measured by
// BenchmarkLongestFirst (docs/performance.md).
const longQuantile = 0.95

// expectLength is the tokens a request is expected to take in all, done
// of them streamed: typically, the median of the run's answers longer
// than done (lengths, sorted), and long, their longQuantile. With fewer
// than minLengthSample such answers, twice and four times done. The
// prompt's length hint raises both when it is longer.
func expectLength(done float64, hint int, lengths []int) (typical, long float64) {
	i, _ := slices.BinarySearch(lengths, int(done)+1)
	above := lengths[i:]
	typical, long = 2*done, 4*done
	if len(above) >= minLengthSample {
		typical = float64(above[len(above)/2])
		long = float64(above[int(longQuantile*float64(len(above)-1))])
	}
	floor := max(float64(hint), done+1)
	return max(typical, floor), max(long, floor)
}

// hedgeable lists, for l's heartbeat, the requests of l this worker
// generates that another may hedge: none while the run still has
// prompts to deliver (as last read) or for a --turns all run; the
// oldest first, at most schema.MaxHedgeable.
func (w *Worker) hedgeable(l *lane, now time.Time) []schema.Flight {
	if l.pending.Load() != 0 || l.manifest.TurnsMode() == schema.TurnsAll {
		return nil
	}
	type sent struct {
		f  schema.Flight
		at time.Time
	}
	var out []sent
	w.inFlight.Range(func(_, v any) bool {
		f := v.(*flight)
		if f.lane != l || f.hedge || f.group {
			return true
		}
		f.mu.Lock()
		at := f.sent
		f.mu.Unlock()
		if at.IsZero() {
			return true
		}
		_, hedged := l.hedgedBy.Load(f.seq)
		out = append(out, sent{schema.Flight{Seq: f.seq, ID: f.unit.ID, Sample: f.unit.Sample, Tokens: int(f.tokens.Load()),
			ElapsedMillis: now.Sub(at).Milliseconds(), Hint: f.hint, Hedged: hedged}, at})
		return true
	})
	slices.SortFunc(out, func(a, b sent) int { return a.at.Compare(b.at) })
	fs := make([]schema.Flight, 0, min(len(out), schema.MaxHedgeable))
	for _, s := range out[:min(len(out), schema.MaxHedgeable)] {
		fs = append(fs, s.f)
	}
	return fs
}

// hedge is a hedge running on this worker.
type hedge struct {
	cancel context.CancelCauseFunc
}

// startHedges sends a hedge of each of fs. Each takes a window slot for
// as long as it generates, ahead of any pull, as a conversation's next
// turn does: at the end of a run the slots not generating are mostly
// held by a pull waiting on the empty stream, which gives them back
// within PullWait. A hedge that gets no slot by then is not sent.
func (w *Worker) startHedges(l *lane, fs []peerFlight) {
	ctx := w.hedgeCtx()
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
		w.hedging.Add(1)
		started++
		go func() {
			defer w.hedging.Done()
			defer cancel(nil)
			defer l.hedges.Delete(f.Seq)
			sctx, stop := context.WithTimeout(hctx, 2*w.cfg.PullWait)
			err := w.win.acquireTurn(sctx)
			stop()
			if err != nil {
				return
			}
			defer w.win.release()
			w.runHedge(hctx, l, f)
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

// runHedge sends the hedge of f and stores its answer if it is the
// first.
func (w *Worker) runHedge(ctx context.Context, l *lane, f peerFlight) {
	log := l.log.With("id", f.ID, "hedge_of", f.worker)
	if f.Sample > 0 {
		log = log.With("sample", f.Sample)
	}
	p, err := w.readPrompt(ctx, f.Seq)
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
	if res, err := lastStored(ctx, w.results, schema.ResultSubject(l.run, p.Unit())); err != nil || res != nil {
		return // answered already, or the stream cannot tell: not worth a copy
	}
	w.announceHedge(l, schema.HedgeStarted, f.Seq, p.Unit())
	l.n.hedges.Add(1)
	fl := &flight{lane: l, last: true, hint: p.LengthHint, attempt: 1, seq: f.Seq, unit: p.Unit(), hedge: true}
	w.inFlight.Store(hedgeKey(f.Seq), fl)
	defer w.inFlight.Delete(hedgeKey(f.Seq))
	msgs := make([]openai.Message, len(p.Messages))
	for i, m := range p.Messages {
		msgs[i] = openai.Message{Role: m.Role, Content: m.Content}
	}
	t, err := w.askTurn(ctx, j, 0, msgs, fl)
	if err != nil {
		if errors.Is(context.Cause(ctx), errHedgeLost) {
			l.n.hedgedTokens.Add(fl.tokens.Load())
			w.metrics.hedged(l.run, HedgeLost, fl.tokens.Load())
			log.Debug("hedge cancelled: the original's answer was stored first", "tokens", fl.tokens.Load())
			return
		}
		l.n.hedgedTokens.Add(fl.tokens.Load())
		w.metrics.hedged(l.run, HedgeFailed, fl.tokens.Load())
		if ctx.Err() == nil {
			log.Info("hedge failed; the original goes on", "err", err)
		}
		return
	}
	j.turns = append(j.turns, t)
	r := w.result(1, j)
	r.Hedged = true
	data, err := schema.EncodeResult(r)
	if err != nil {
		log.Error("encode hedge result", "err", err)
		return
	}
	subject := schema.ResultSubject(l.run, p.Unit())
	ours, err := w.storeOnce(ctx, w.message(l.run, subject, schema.KindResult, p.Unit(), data))
	if err == nil && !ours {
		ours, err = w.storedByUs(ctx, subject)
	}
	tokens := int64(r.CompletionTokens)
	switch {
	case err != nil:
		l.n.hedgedTokens.Add(tokens)
		w.metrics.hedged(l.run, HedgeFailed, tokens)
		log.Warn("cannot store a hedge's answer; the original goes on", "err", err)
	case ours:
		l.n.hedgesWon.Add(1)
		l.n.completed.Add(1)
		w.metrics.hedged(l.run, HedgeWon, 0)
		w.metrics.settled(l.run, completedOutcome(j))
		w.announceHedge(l, schema.HedgeWon, f.Seq, p.Unit())
		log.Debug("hedge answered first", "tokens", tokens)
	default:
		l.n.hedgedTokens.Add(tokens)
		w.metrics.hedged(l.run, HedgeLost, tokens)
		log.Debug("hedge answered second: the original's answer is kept", "tokens", tokens)
	}
}

// readPrompt reads the prompt message at seq in the prompts stream.
func (w *Worker) readPrompt(ctx context.Context, seq uint64) (*schema.Prompt, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := w.prompts.GetMsg(gctx, seq)
	if err != nil {
		return nil, fmt.Errorf("read prompt message %d: %w", seq, err)
	}
	if err := schema.CheckSchemaHeader(schema.KindPrompt, raw.Header.Get(schema.HeaderSchema)); err != nil {
		return nil, err
	}
	return schema.DecodePrompt(raw.Data)
}

// storedByUs reads back the result stored on subject after a publish
// that was not known to be ours (its acknowledgement may have been lost)
// and reports whether this worker stored it.
func (w *Worker) storedByUs(ctx context.Context, subject string) (bool, error) {
	m, err := lastStored(ctx, w.results, subject)
	if err != nil || m == nil {
		return false, err
	}
	return m.Header.Get(schema.HeaderWorker) == w.cfg.Name, nil
}

// announceHedge tells the run's workers about a hedge of the request at
// seq: best effort, as every notice is.
func (w *Worker) announceHedge(l *lane, event string, seq uint64, u schema.Unit) {
	b, err := json.Marshal(schema.HedgeNotice{Run: l.run, Worker: w.cfg.Name, Event: event, Seq: seq, ID: u.ID, Sample: u.Sample})
	if err == nil {
		err = w.nc.Publish(schema.HedgeSubject(l.run, w.cfg.Name), b)
	}
	if err != nil {
		l.log.Debug("cannot announce a hedge", "event", event, "err", err)
	}
}

// heardHedge returns the handler of the run's hedge notices, this
// worker's own left out: a hedge started of one of its requests marks
// it, so that its answer, stored first, is announced; an answer stored
// first elsewhere cancels the copy here, the request or the hedge.
func (w *Worker) heardHedge(l *lane) nats.MsgHandler {
	return func(m *nats.Msg) {
		var n schema.HedgeNotice
		if json.Unmarshal(m.Data, &n) != nil || n.Worker == w.cfg.Name || n.Run != l.run {
			return
		}
		switch n.Event {
		case schema.HedgeStarted:
			if v, ok := w.inFlight.Load(n.Seq); ok && v.(*flight).lane == l {
				l.hedgedBy.Store(n.Seq, n.Worker)
			}
		case schema.HedgeWon:
			if v, ok := l.hedges.Load(n.Seq); ok {
				v.(*hedge).cancel(errHedgeLost)
			}
			if v, ok := w.inFlight.Load(n.Seq); ok {
				f := v.(*flight)
				if f.lane != l || f.unit != (schema.Unit{ID: n.ID, Sample: n.Sample}) {
					return
				}
				if f.cancelAs(flightHedgedAway, errHedgeWon, flightWaiting, flightStreaming) {
					l.n.hedgedTokens.Add(f.tokens.Load())
					w.metrics.hedged(l.run, "", f.tokens.Load())
				}
			}
		}
	}
}

// followHedges follows, until ctx ends, the hedge notices of l's run.
func (w *Worker) followHedges(ctx context.Context, l *lane) {
	sub, err := w.nc.Subscribe(schema.HedgeFilter(l.run), w.heardHedge(l))
	if err != nil {
		l.log.Warn("cannot follow the run's hedge notices: a hedged request runs to its end on both workers", "err", err)
		return
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
}

// hedgeCtx is the context hedges run under: Run's own, which ends as the
// worker begins to stop (a hedge is never worth the grace period); nil
// before Run.
func (w *Worker) hedgeCtx() context.Context {
	w.hedgeMu.Lock()
	defer w.hedgeMu.Unlock()
	return w.hedgeRoot
}

// setHedgeCtx sets hedgeCtx.
func (w *Worker) setHedgeCtx(ctx context.Context) {
	w.hedgeMu.Lock()
	defer w.hedgeMu.Unlock()
	w.hedgeRoot = ctx
}

// settleHedgedAway ends a delivery whose request was cancelled because a
// hedge on another worker stored its answer first: the prompt is
// acknowledged once the answer is found stored, and handed back at once
// otherwise (the notice cannot have come before the answer was stored,
// but a redelivery costs nothing if it did).
func (w *Worker) settleHedgedAway(ctx context.Context, d *delivery, j *job, log *slog.Logger) {
	d.lane.hedgedBy.Delete(d.seq)
	res, err := lastStored(ctx, w.results, schema.ResultSubject(d.lane.run, j.p.Unit()))
	if err != nil || res == nil {
		log.Warn("a hedge said it stored this prompt's answer, which cannot be found; handing the prompt back", "err", err)
		w.metrics.settled(d.lane.run, OutcomeHandedBack)
		d.nak(0, log)
		return
	}
	if aerr := d.ack(ctx); aerr != nil {
		log.Warn("ack of a prompt answered by a hedge failed; it comes back and is acknowledged then", "err", aerr)
	}
	d.lane.n.hedgedAway.Add(1)
	w.metrics.settled(d.lane.run, OutcomeHedged)
	log.Debug("answered by a hedge on a faster worker: acknowledged", "hedge", res.Header.Get(schema.HeaderWorker))
}

// lastTurnTokens is the completion tokens of j's last turn.
func lastTurnTokens(j *job) int {
	if len(j.turns) == 0 || j.turns[len(j.turns)-1].Answer.Usage == nil {
		return 0
	}
	return j.turns[len(j.turns)-1].Answer.Usage.CompletionTokens
}

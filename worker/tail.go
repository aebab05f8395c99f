package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// At the end of a run the prompts still queued inside a slow server hold
// the run up while faster workers sit idle. The tail hand-back gives
// them back: when the prompts stream has nothing left to deliver and
// another worker of the run has free slots (its heartbeats say so), a
// request that has waited longer than Config.HandBackAfter, and three
// times the backend's shortest time to first token, without a first token
// is cancelled and its prompt handed back at once (NAK without delay),
// for the idle worker to take. A request that has streamed a token is
// never handed back. The window shrinks first by as many, and the
// cancel waits until this worker has no pull open, so that the prompt
// goes to the idle worker and not back here.

// Flight states (flight.state).
const (
	flightWaiting    int32 = iota // sent, no token yet
	flightStreaming               // a token has come: never handed back
	flightHandedBack              // cancelled to be handed back
)

// errTailHandBack ends a request cancelled by the tail hand-back.
var errTailHandBack = errors.New("handed back at the end of the run for an idle worker: it had waited without a first token")

// ttfFactor is how many of the backend's shortest times to first token
// a request must have waited, at least, to be handed back: well past
// what the server takes when it has room. The shortest, not the median:
// behind a queue that lasts, as a fixed window too large for its server
// keeps, every time to first token is mostly queue.
const ttfFactor = 3

// chat sends req through f: the request can be handed back by the tail
// hand-back until its first token, and its time to first token is kept.
func (w *Worker) chat(ctx context.Context, f *flight, req openai.ChatRequest, progress openai.Progress) (*openai.Completion, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f.mu.Lock()
	f.sent, f.cancel = time.Now(), cancel
	f.state.Store(flightWaiting)
	f.mu.Unlock()
	comp, err := w.backend.ChatStream(rctx, req, func(n int) {
		if n > 0 {
			f.state.CompareAndSwap(flightWaiting, flightStreaming)
		}
		progress(n)
	})
	if err != nil && f.state.Load() == flightHedgedAway && ctx.Err() == nil {
		return nil, fmt.Errorf("%w: %w", errHedgeWon, err)
	}
	if err != nil && f.state.Load() == flightHandedBack && ctx.Err() == nil {
		if errors.Is(context.Cause(rctx), errSlowForHint) {
			return nil, fmt.Errorf("%w: %w", errSlowForHint, err)
		}
		return nil, fmt.Errorf("%w: %w", errTailHandBack, err)
	}
	if err == nil && comp != nil {
		if comp.TTFT > 0 {
			w.ttfts.add(comp.TTFT)
		}
		w.latency.add(time.Since(f.sent))
	}
	return comp, err
}

// followPeers follows, until ctx ends, the heartbeats of the other
// workers of l's run. Without them no prompt is handed back, nor pull
// held back, at the end of the run.
func (w *Worker) followPeers(ctx context.Context, l *lane) {
	w.followHedges(ctx, l)
	sub, err := w.nc.Subscribe(schema.HeartbeatFilter(l.run), l.peers.heard(w.cfg.Name))
	if err != nil {
		l.log.Warn("cannot follow the other workers' heartbeats: no prompt is handed back, nor pull held back, at the end of the run", "err", err)
		return
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
}

type waitingFlight struct {
	f    *flight
	sent time.Time
}

// waitingFlights are the requests of flights sent before `before` that
// had no token yet and may be handed back, by lane.
func waitingFlights(flights []flightView, before time.Time) map[*lane][]waitingFlight {
	out := map[*lane][]waitingFlight{}
	for _, fv := range flights {
		if fv.f.last || fv.state != flightWaiting || fv.sent.IsZero() || !fv.sent.Before(before) {
			continue
		}
		out[fv.lane] = append(out[fv.lane], waitingFlight{f: fv.f, sent: fv.sent})
	}
	return out
}

// ttftLeast keeps the shortest time to first token of the requests
// answered. The zero value has seen none.
type ttftLeast struct {
	mu       sync.Mutex
	shortest time.Duration
}

func (t *ttftLeast) add(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shortest == 0 || d < t.shortest {
		t.shortest = d
	}
}

// least is the shortest seen, 0 before any.
func (t *ttftLeast) least() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shortest
}

// peers are the last heartbeats of the run's other workers. The zero
// value is empty.
type peers struct {
	mu   sync.Mutex
	last map[string]peer
	// gone are the peers dropped from last for silence that had not said
	// they were stopping, by name, kept for goneKept so that the prompts
	// coming back can be put down to them.
	gone map[string]silentPeer
}

// goneKept is how long a silent peer is remembered after it is dropped.
const goneKept = 10 * time.Minute

// dropLocked removes a peer not heard from for too long; one that did not
// say it was stopping is remembered as gone. p.mu must be held.
func (p *peers) dropLocked(name string, pr peer, now time.Time) {
	delete(p.last, name)
	if pr.stopping {
		return
	}
	if p.gone == nil {
		p.gone = map[string]silentPeer{}
	}
	for n, g := range p.gone {
		if now.Sub(g.since) > goneKept {
			delete(p.gone, n)
		}
	}
	p.gone[name] = silentPeer{name: name, inFlight: pr.inFlight, since: pr.at, said: pr.silentSaid}
}

type peer struct {
	at        time.Time // when it was heard, by this worker's clock
	window    int
	free      int
	inFlight  int
	completed int64
	rate      float64 // prompts completed a second, 0 while unknown
	pulling   bool    // neither paused nor holding back for the tail
	tokens    int64   // its TokensStreamed
	// speed is the tokens a second each of its requests streams, 0
	// while unknown (see nextSpeed).
	speed float64
	// flights are the requests it lists as hedgeable (hedge.go).
	flights []schema.Flight
	// hintError is the hints' error it reports (hintlimit.go).
	hintError float64
	// stopping: its last heartbeat said it was stopping on purpose;
	// silentSaid: this worker has said it went silent.
	stopping, silentSaid bool
}

// heard returns the handler of the run's heartbeats, self's left out.
func (p *peers) heard(self string) nats.MsgHandler {
	return func(m *nats.Msg) {
		var hb schema.Heartbeat
		if json.Unmarshal(m.Data, &hb) != nil || hb.Worker == "" || hb.Worker == self {
			return
		}
		// Slots are taken by the requests generating, one entry each in
		// InFlightTokens; prompts being stored hold none.
		free := hb.Window - len(hb.InFlightTokens)
		if hb.FreeSlots != nil {
			free = *hb.FreeSlots
		}
		if hb.Paused || hb.TailHold {
			free = 0 // a paused worker, or one holding back, pulls nothing
		}
		now := time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.last == nil {
			p.last = map[string]peer{}
		}
		pr := peer{at: now, window: hb.Window, free: max(free, 0), inFlight: hb.InFlight, completed: hb.Completed,
			pulling: !hb.Paused && !hb.TailHold, tokens: hb.TokensStreamed, flights: hb.Hedgeable, hintError: hb.HintError,
			stopping: hb.PausedReason == schema.PausedStopping}
		if was, ok := p.last[hb.Worker]; ok {
			pr.rate = nextRate(was.rate, was.completed, hb.Completed, now.Sub(was.at))
			decoding := 0
			for _, c := range hb.InFlightTokens {
				if c > 0 {
					decoding++
				}
			}
			pr.speed = nextSpeed(was.speed, hb.TokensStreamed-was.tokens, decoding, now.Sub(was.at))
		}
		if hb.Speed > 0 {
			pr.speed = hb.Speed // its own measure, when it sends one
		}
		p.last[hb.Worker] = pr
		delete(p.gone, hb.Worker)
	}
}

// silentPeer is a worker of the run that stopped sending heartbeats
// without saying it was stopping, and the prompts it held then.
type silentPeer struct {
	name     string
	inFlight int
	since    time.Time
	// said: returned by newlySilent already.
	said bool
}

// quiet names the peers not heard from for `after` that did not say
// they were stopping.
func (p *peers) quiet(now time.Time, after time.Duration) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for name, pr := range p.last {
		if !pr.stopping && now.Sub(pr.at) >= after {
			out = append(out, name)
		}
	}
	for name := range p.gone {
		if _, back := p.last[name]; !back {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// newlySilent returns the peers not heard from for `after` that did not
// say they were stopping and have not been returned before: workers that
// died or lost their connection, whose prompts come back after AckWait.
func (p *peers) newlySilent(now time.Time, after time.Duration) []silentPeer {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []silentPeer
	for name, pr := range p.last {
		if pr.silentSaid || pr.stopping || now.Sub(pr.at) < after {
			continue
		}
		pr.silentSaid = true
		p.last[name] = pr
		out = append(out, silentPeer{name: name, inFlight: pr.inFlight, since: pr.at})
	}
	// Dropped for silence before this was asked.
	for name, g := range p.gone {
		if g.said {
			continue
		}
		g.said = true
		p.gone[name] = g
		out = append(out, g)
	}
	return out
}

// free is the free slots of the other workers heard from within
// `recent` of now.
func (p *peers) free(now time.Time, recent time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for name, pr := range p.last {
		if now.Sub(pr.at) > recent {
			p.dropLocked(name, pr, now)
			continue
		}
		n += pr.free
	}
	return n
}

// windows counts the other workers heard from within `recent` of now
// and sums their windows.
func (p *peers) windows(now time.Time, recent time.Duration) (workers, sum int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.last {
		if now.Sub(pr.at) <= recent {
			workers++
			sum += pr.window
		}
	}
	return workers, sum
}

// pulling is what is known of the other workers heard from within
// `recent` of now that pull prompts (see holdForTail).
func (p *peers) pulling(now time.Time, recent time.Duration) []tailPeer {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []tailPeer
	for _, pr := range p.last {
		if now.Sub(pr.at) > recent || !pr.pulling {
			continue
		}
		out = append(out, tailPeer{rate: pr.rate, inFlight: pr.inFlight, free: pr.free, speed: pr.speed, hintError: pr.hintError})
	}
	return out
}

// hedgeable is what the other workers heard from within `recent` of
// now, whose speed is known, list as hedgeable.
func (p *peers) hedgeable(now time.Time, recent time.Duration) []peerFlight {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []peerFlight
	for name, pr := range p.last {
		if now.Sub(pr.at) > recent || pr.speed <= 0 {
			continue
		}
		for _, f := range pr.flights {
			out = append(out, peerFlight{Flight: f, worker: name, speed: pr.speed, age: now.Sub(pr.at)})
		}
	}
	return out
}

// tailDecision is what the tail policy decides for one run.
type tailDecision struct {
	hold      bool
	pending   uint64
	restore   bool
	retire    int
	handBack  []waitingFlight
	idleSlots int
}

// tailPolicy decides, for lane i, whether to hold back from its prompts
// near the end of the run (holdForTail) and which requests to hand back
// for idle workers (tail.go): when the run has nothing left to deliver
// and its other workers have free slots, as many of its requests that
// have waited without a first token as they have slots, the youngest
// first, with the window retired by as many; not while a pull is open,
// which would take them back. A fixed window shrunk so comes back when
// prompts come again.
func tailPolicy(p policy, r readings, i int) tailDecision {
	lr := r.lanes[i]
	shrunk := !p.auto && r.size < p.window
	if !tailNeedsConsumer(p, r, i) || lr.consumer == nil {
		return tailDecision{}
	}
	pending := lr.consumer.pending
	d := tailDecision{pending: pending,
		hold: holdForTail(int64(pending), r.ownLatency, lr.others)}
	if len(lr.waiting) == 0 && !shrunk {
		return d
	}
	if pending > 0 {
		d.restore = shrunk
		return d
	}
	n := min(len(lr.waiting), lr.peersFree)
	if n == 0 {
		return d
	}
	d.retire, d.idleSlots = n, lr.peersFree
	if r.pulling {
		return d // the open pull ends within PullWait; hand back then
	}
	waiting := slices.Clone(lr.waiting)
	// The youngest first: a FIFO queue would serve them last.
	slices.SortFunc(waiting, func(a, b waitingFlight) int { return b.sent.Compare(a.sent) })
	d.handBack = waiting[:n]
	return d
}

// tailNeedsConsumer reports whether the tail policy needs lane i's
// consumer read: some of its requests may be handed back, the window is
// shrunk by an earlier hand-back, other workers pull and this one knows
// its own pace, or other workers are heard and requests may be hedged
// (whether here or there depends on the run having nothing left).
func tailNeedsConsumer(p policy, r readings, i int) bool {
	lr := r.lanes[i]
	shrunk := !p.auto && r.size < p.window
	return len(lr.waiting) > 0 || shrunk || len(lr.others) > 0 && r.ownLatency > 0 || p.hedge && lr.peerWorkers > 0
}

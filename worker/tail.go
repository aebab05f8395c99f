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
	"github.com/nats-io/nats.go/jetstream"

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
	if err != nil && f.state.Load() == flightHandedBack && ctx.Err() == nil {
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

// handBackTail checks every WindowPoll, until ctx ends, whether to hold
// back from pulling (tailhold.go) and for a tail to hand back. cons is
// the run's workers consumer.
func (w *Worker) handBackTail(ctx context.Context, cons jetstream.Consumer) {
	sub, err := w.nc.Subscribe(schema.HeartbeatFilter(w.cfg.Run), w.peers.heard(w.cfg.Name))
	if err != nil {
		w.log.Warn("cannot follow the other workers' heartbeats: no prompt is handed back, nor pull held back, at the end of the run", "err", err)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	t := time.NewTicker(w.cfg.WindowPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.tailTick(ctx, cons)
	}
}

// tailTick holds back or hands back what the tail allows now.
func (w *Worker) tailTick(ctx context.Context, cons jetstream.Consumer) {
	shrunk := w.win.capacity() < w.cfg.Window && !w.cfg.AutoWindow
	var waiting []waitingFlight
	var waited time.Duration
	if w.cfg.HandBackAfter > 0 {
		waited = w.handBackWait()
		waiting = w.waitingFlights(time.Now().Add(-waited))
	}
	recent := 3 * w.cfg.Heartbeat
	others := w.peers.pulling(time.Now(), recent)
	own := w.latency.get()
	if len(waiting) == 0 && !shrunk && (len(others) == 0 || own == 0) {
		w.setTailHold(false, 0, 0)
		return
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	info, err := cons.Info(ictx)
	cancel()
	if err != nil {
		w.setTailHold(false, 0, 0)
		return
	}
	w.setTailHold(holdForTail(int64(info.NumPending), own, others), info.NumPending, own)
	if len(waiting) == 0 && !shrunk {
		return
	}
	if info.NumPending > 0 {
		if shrunk {
			w.win.resize(w.cfg.Window) // prompts came again: the fixed window back
		}
		return
	}
	free := w.peers.free(time.Now(), recent)
	n := min(len(waiting), free)
	if n == 0 {
		return
	}
	// No slot this frees may pull the prompt back here.
	w.win.shrinkBy(n)
	if w.win.pulling() {
		return // the open pull ends within PullWait; cancel then
	}
	slices.SortFunc(waiting, func(a, b waitingFlight) int { return b.sent.Compare(a.sent) })
	handed := 0
	for _, f := range waiting[:n] {
		// The youngest first: a FIFO queue would serve them last.
		if f.f.state.CompareAndSwap(flightWaiting, flightHandedBack) {
			f.cancel(errTailHandBack)
			handed++
		}
	}
	if handed > 0 {
		w.log.Info("handing back prompts waiting without a first token, for idle workers of the run",
			"prompts", handed, "waited_over", waited.Round(time.Millisecond), "idle_slots", free)
	}
}

// setTailHold holds back from pulling, or not, logging each change.
func (w *Worker) setTailHold(hold bool, pending uint64, own time.Duration) {
	if w.tailHold.Swap(hold) == hold {
		return
	}
	if hold {
		w.tailHolds.Add(1)
		w.log.Info("holding back near the end of the run: the other workers would finish the prompts left sooner than this one",
			"pending", pending, "own_latency", own.Round(time.Millisecond))
		return
	}
	w.log.Info("pulling again", "pending", pending)
}

// handBackWait is how long a request must have waited without a first
// token to be handed back: Config.HandBackAfter, or ttfFactor times the
// shortest time to first token seen if that is longer.
func (w *Worker) handBackWait() time.Duration {
	return max(w.cfg.HandBackAfter, ttfFactor*w.ttfts.least())
}

type waitingFlight struct {
	f      *flight
	sent   time.Time
	cancel context.CancelCauseFunc
}

// waitingFlights are the requests sent before `before` that have no
// token yet.
func (w *Worker) waitingFlights(before time.Time) []waitingFlight {
	var out []waitingFlight
	w.inFlight.Range(func(_, v any) bool {
		f := v.(*flight)
		if f.last || f.state.Load() != flightWaiting {
			return true
		}
		f.mu.Lock()
		sent, cancel := f.sent, f.cancel
		f.mu.Unlock()
		if cancel != nil && sent.Before(before) {
			out = append(out, waitingFlight{f: f, sent: sent, cancel: cancel})
		}
		return true
	})
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
}

type peer struct {
	at        time.Time // when it was heard, by this worker's clock
	window    int
	free      int
	inFlight  int
	completed int64
	rate      float64 // prompts completed a second, 0 while unknown
	pulling   bool    // neither paused nor holding back for the tail
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
		if hb.Paused {
			free = 0 // a paused worker pulls nothing
		}
		now := time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.last == nil {
			p.last = map[string]peer{}
		}
		pr := peer{at: now, window: hb.Window, free: max(free, 0), inFlight: hb.InFlight, completed: hb.Completed,
			pulling: !hb.Paused && !hb.TailHold}
		if was, ok := p.last[hb.Worker]; ok {
			pr.rate = nextRate(was.rate, was.completed, hb.Completed, now.Sub(was.at))
		}
		p.last[hb.Worker] = pr
	}
}

// free is the free slots of the other workers heard from within
// `recent` of now.
func (p *peers) free(now time.Time, recent time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for name, pr := range p.last {
		if now.Sub(pr.at) > recent {
			delete(p.last, name)
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
		out = append(out, tailPeer{rate: pr.rate, inFlight: pr.inFlight, free: pr.free})
	}
	return out
}

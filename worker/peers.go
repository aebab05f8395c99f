package worker

import (
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

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
	pulling   bool    // neither paused nor holding back
	tokens    int64   // its TokensStreamed
	// speed is the tokens a second each of its requests streams, 0
	// while unknown (see policy.NextSpeed).
	speed float64
	// flights are the requests it lists as hedgeable.
	flights []schema.Flight
	// hintError is the hints' error it reports.
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
		now := time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.last == nil {
			p.last = map[string]peer{}
		}
		pr := peer{at: now, window: hb.Window, free: policy.PeerFree(hb), inFlight: hb.InFlight, completed: hb.Completed,
			pulling: policy.PeerPulls(hb), tokens: hb.TokensStreamed, flights: hb.Hedgeable, hintError: hb.HintError,
			stopping: hb.PausedReason == schema.PausedStopping}
		if was, ok := p.last[hb.Worker]; ok {
			pr.rate = policy.NextRate(was.rate, was.completed, hb.Completed, now.Sub(was.at))
			decoding := 0
			for _, c := range hb.InFlightTokens {
				if c > 0 {
					decoding++
				}
			}
			pr.speed = policy.NextSpeed(was.speed, hb.TokensStreamed-was.tokens, decoding, now.Sub(was.at))
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

// view is what the other workers heard from within `recent` of now say
// to a decision: those that pull, their free slots, and the requests
// they list that may be hedged, less those ours says are hedged here
// already. Peers not heard from within `recent` are dropped.
func (p *peers) view(now time.Time, recent time.Duration, ours func(seq uint64) bool) policy.Peers {
	p.mu.Lock()
	defer p.mu.Unlock()
	var v policy.Peers
	for name, pr := range p.last {
		if now.Sub(pr.at) > recent {
			p.dropLocked(name, pr, now)
			continue
		}
		v.Free += pr.free
		v.Workers++
		v.Windows += pr.window
		if pr.pulling {
			v.Pulling = append(v.Pulling, policy.Peer{Rate: pr.rate, InFlight: pr.inFlight, Free: pr.free, Speed: pr.speed, HintError: pr.hintError})
		}
		if pr.speed <= 0 {
			continue
		}
		for _, f := range pr.flights {
			if !ours(f.Seq) {
				v.Hedgeable = append(v.Hedgeable, policy.PeerFlight{Flight: f, Worker: name, Speed: pr.speed, Age: now.Sub(pr.at)})
			}
		}
	}
	return v
}

package policytest

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// Recorder writes the decisions of workers as they make them. The zero
// value is not usable; see NewRecorder.
type Recorder struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	seqs  map[any]*recordSeq
}

// recordSeq is what a Recorder keeps of one worker's decisions: its
// fields are those of the worker's decision goroutine but for n, which
// is under Recorder.mu.
type recordSeq struct {
	id    string
	clock goldenClock
	n     int
	last  goldenFlights
}

// NewRecorder returns a recorder that writes to w, naming each worker's
// sequence label followed by its number.
func NewRecorder(w io.Writer, label string) *Recorder {
	return &Recorder{w: w, label: label, seqs: map[any]*recordSeq{}}
}

// Record is told of a decision of the worker known as who (any value
// that tells workers apart) and named name, under c, before it is made
// from s and in; it returns what to tell of the plan and memory made.
// One goroutine makes a worker's decisions, one at a time.
func (r *Recorder) Record(who any, name string, c policy.Config, s policy.Snapshot, in policy.Memory) func(policy.Plan, policy.Memory) {
	r.mu.Lock()
	seq := r.seqs[who]
	first := seq == nil
	if first {
		seq = &recordSeq{id: fmt.Sprintf("%s%d", r.label, len(r.seqs)), clock: goldenClock{epoch: s.Now}}
		r.seqs[who] = seq
	}
	n := seq.n
	seq.n++
	r.mu.Unlock()
	rec := goldenRecord{Seq: seq.id, Worker: name, N: n}
	rec.Snap, seq.last = snapOut(seq.clock, s, seq.last)
	if first {
		g := configOut(c)
		m := memoryOut(seq.clock, in)
		rec.Config, rec.Memory = &g, &m
	}
	return func(pl policy.Plan, m policy.Memory) {
		rec.Plan = planOut(pl, s)
		rec.Next = memoryOut(seq.clock, m)
		line, err := json.Marshal(rec)
		if err != nil {
			panic(fmt.Sprintf("encode a decision: %v", err))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, err := r.w.Write(append(line, '\n')); err != nil {
			panic(fmt.Sprintf("write a decision: %v", err))
		}
	}
}

func configOut(c policy.Config) goldenConfig {
	return goldenConfig{Auto: c.Auto, Window: c.Window, MaxWindow: c.MaxWindow, HandBack: c.HandBackAfter > 0,
		HandBackAfter: int64(c.HandBackAfter), AckEvery: int64(c.AckEvery), Yield: c.Yield, TTFTSLO: int64(c.TTFTSLO),
		Hedge: c.Hedge, HedgeMax: c.HedgeMax, PeekEvery: int64(c.PeekEvery)}
}

// snapOut is s's record, last being the flights of the snapshot before
// in the sequence; it returns this one's.
func snapOut(c goldenClock, s policy.Snapshot, last goldenFlights) (goldenSnap, goldenFlights) {
	g := goldenSnap{Now: c.ns(s.Now), Size: s.Size, Taken: s.Taken, Generating: s.Generating, Pulling: s.Pulling, Paused: s.Holds.Pause().Paused,
		Stopping: s.Holds.Stopping, StoreFull: s.Holds.StoreFull, Breaker: s.Holds.Breaker,
		Load: loadOut(s.Load.Load), NotServed: s.Load.NotServed, CannotRead: s.Load.NoReader,
		Latency: int64(s.Pace.Latency), LeastTTFT: int64(s.Pace.LeastTTFT), Tokens: s.Pace.Tokens}
	if s.Load.Err != nil && !s.Load.NoReader {
		g.LoadErr = s.Load.Err.Error()
	}
	for _, l := range s.Lanes {
		gl := goldenLane{MaxDeliver: l.MaxDeliver, PeersFree: l.Peers.Free, PeerWorkers: l.Peers.Workers, PeerWindows: l.Peers.Windows,
			TailHold: l.Holds.TailHold, HintHold: l.Holds.HintHold, RunPaused: l.Holds.RunPaused, RunGone: l.Holds.RunGone,
			ConsumerFull: l.ConsumerFull, Hedges: l.Hedges,
			HintError: jf(l.HintError), NextHint: l.NextHint, MeanHint: jf(l.MeanHint), Bounced: l.Bounced}
		if len(l.Lengths) > 0 {
			gl.Lengths = deltas(l.Lengths)
		}
		for _, o := range l.Peers.Pulling {
			gl.Others = append(gl.Others, [5]jf{jf(o.Rate), jf(o.InFlight), jf(o.Free), jf(o.Speed), jf(o.HintError)})
		}
		if k := l.Consumer; k != nil {
			gl.Consumer = &goldenConsumer{Durable: k.Durable, Pending: k.Pending, AckPending: k.AckPending, MaxAckPending: k.MaxAckPending,
				Delivered: k.Delivered, Filter: k.Filter}
		}
		for _, f := range l.Peers.Hedgeable {
			gl.Hedgeable = append(gl.Hedgeable, goldenPeerFl{Seq: f.Seq, ID: f.ID, Sample: f.Sample, Tokens: f.Tokens, Elapsed: f.ElapsedMillis,
				Hint: f.Hint, Hedged: f.Hedged, Worker: f.Worker, Speed: jf(f.Speed), Age: int64(f.Age)})
		}
		g.Lanes = append(g.Lanes, gl)
	}
	var prev int64
	now := goldenFlights{}
	for _, f := range s.Flights {
		gf := goldenFlight{seq: int64(f.Key.Seq), sample: int64(f.Key.Sample), lane: int64(f.Lane), state: int64(f.State),
			tokens: f.Tokens, hint: int64(f.Hint), attempt: int64(f.Attempt), sent: unsent}
		if f.Last {
			gf.flags |= 1
		}
		switch f.Key.Kind {
		case policy.HedgeOf:
			gf.flags |= 2
		case policy.SampleOf:
			gf.flags |= 8
		}
		if f.Group {
			gf.flags |= 4
		}
		if !f.Sent.IsZero() {
			gf.sent = c.ns(f.Sent)
		}
		g.Flights = append(g.Flights, last.encode(gf, prev))
		now[gf.key()], prev = gf, gf.seq
	}
	return g, now
}

func planOut(pl policy.Plan, s policy.Snapshot) goldenPlan {
	g := goldenPlan{Size: pl.Window.Size, Why: pl.Window.Why, Retire: pl.Retire, Cap: pl.Yield.Cap, CapWhy: pl.Yield.Why, P95: int64(pl.Yield.P95)}
	if fb := pl.Window.FallBack; fb != nil {
		e := ""
		if fb.Err != nil {
			e = fb.Err.Error()
		}
		g.FallBack = &[2]string{fb.Why, e}
	}
	if pl.Window.Kept != nil {
		g.Kept = pl.Window.Kept.Error()
	}
	flight := func(k policy.FlightKey) int {
		return slices.IndexFunc(s.Flights, func(f policy.Flight) bool { return f.Key == k })
	}
	for i, lp := range pl.Lanes {
		gp := goldenLanePlan{Hold: lp.Hold, Pending: lp.Pending, IdleSlots: lp.IdleSlots, Full: int(lp.Full),
			HintLimit: jf(lp.HintLimit), HintHold: lp.HintHold}
		if lp.Full == policy.FullSet {
			gp.Need, gp.Workers, gp.Windows = lp.Need, lp.Workers, lp.Windows
		}
		for _, k := range lp.HandBack {
			gp.HandBack = append(gp.HandBack, flight(k))
		}
		for _, k := range lp.SlowBack {
			gp.SlowBack = append(gp.SlowBack, flight(k))
		}
		for _, h := range lp.Hedges {
			gp.Hedges = append(gp.Hedges, slices.Index(s.Lanes[i].Peers.Hedgeable, h))
		}
		g.Lanes = append(g.Lanes, gp)
	}
	return g
}

func memoryOut(c goldenClock, m policy.Memory) goldenMemory {
	g := goldenMemory{RuleMax: m.Rule.Max, RulePrev: loadOut(m.Rule.Prev), Ceiling: jf(m.Rule.Ceiling),
		Read: m.Load.Read, Failures: m.Load.Failures, Fixed: m.Load.Fixed,
		Cap: m.Yield.Cap, Clear: m.Yield.Clear, Lowered: c.opt(m.Yield.Lowered), Batch: jf(m.Yield.Batch), OthersSeen: c.opt(m.Yield.OthersSeen),
		NextAck: c.opt(m.NextAck), FullStreak: slices.Clone(m.FullStreak), Speed: jf(m.Speed), SpeedTokens: m.SpeedTokens, SpeedAt: c.opt(m.SpeedAt)}
	for _, h := range m.Yield.History {
		t := goldenTTF{At: c.ns(h.At)}
		for _, b := range h.Buckets {
			t.Buckets = append(t.Buckets, [2]jf{jf(b.LE), jf(b.Count)})
		}
		g.History = append(g.History, t)
	}
	for _, t := range m.PeekAfter {
		g.PeekAfter = append(g.PeekAfter, c.opt(t))
	}
	return g
}

func loadOut(l *policy.Load) *goldenLoad {
	if l == nil {
		return nil
	}
	g := &goldenLoad{Running: jf(l.Running), Waiting: jf(l.Waiting), KVUsage: jf(l.KVUsage), Preemptions: jf(l.Preemptions)}
	for _, b := range l.TTFT {
		g.TTFT = append(g.TTFT, [2]jf{jf(b.LE), jf(b.Count)})
	}
	return g
}

package policytest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// Decision is one recorded decision: what the worker saw and, for the
// first of its sequence, what it started from; Check says whether a
// plan and memory are the ones it made.
type Decision struct {
	// Seq names the worker's sequence and N the decision's place in it,
	// from 0; Worker is the worker's name.
	Seq, Worker string
	N           int
	Config      policy.Config
	Snapshot    policy.Snapshot
	// Start is the memory the worker started with, on the first decision
	// of its sequence; nil on the others, which start from the memory
	// the decision before made.
	Start *policy.Memory

	clock goldenClock
	plan  goldenPlan
	next  goldenMemory
}

// Check returns an error saying how p and m differ from the plan and
// memory the worker made, nil when they do not.
func (d Decision) Check(p policy.Plan, m policy.Memory) error {
	got, _ := json.Marshal(planOut(p, d.Snapshot))
	want, _ := json.Marshal(d.plan)
	if string(got) != string(want) {
		return fmt.Errorf("plan\n%s\nwant\n%s", got, want)
	}
	got, _ = json.Marshal(memoryOut(d.clock, m))
	want, _ = json.Marshal(d.next)
	if string(got) != string(want) {
		return fmt.Errorf("memory\n%s\nwant\n%s", got, want)
	}
	return nil
}

// Kind names what the recorded plan does, for a tally: "keep", or the
// list of its changes.
func (d Decision) Kind() string {
	g := d.plan
	var does []string
	if g.Size > 0 {
		does = append(does, "resize")
	}
	if g.Retire > 0 {
		does = append(does, "retire")
	}
	if g.Cap > 0 {
		does = append(does, "cap")
	}
	for _, l := range g.Lanes {
		for _, c := range []struct {
			on   bool
			what string
		}{{l.Hold, "hold"}, {len(l.HandBack) > 0, "hand back"}, {len(l.SlowBack) > 0, "hand back slow"},
			{len(l.Hedges) > 0, "hedge"}, {l.HintHold, "hint hold"}, {l.Full != 0, "consumer full"}} {
			if c.on {
				does = append(does, c.what)
			}
		}
	}
	if len(does) == 0 {
		return "keep"
	}
	return fmt.Sprint(does)
}

// Replay reads the decisions recorded in r, in order, and calls each
// with them; it stops at the first error each returns.
func Replay(r io.Reader, each func(Decision) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	type sequence struct {
		cfg  policy.Config
		n    int
		last goldenFlights
	}
	seqs := map[string]*sequence{}
	c := goldenClock{epoch: goldenEpoch}
	for line := 1; sc.Scan(); line++ {
		var rec goldenRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		s := seqs[rec.Seq]
		d := Decision{Seq: rec.Seq, Worker: rec.Worker, N: rec.N, clock: c, plan: rec.Plan, next: rec.Next}
		if s == nil {
			if rec.Config == nil || rec.Memory == nil || rec.N != 0 {
				return fmt.Errorf("line %d: sequence %s starts at decision %d without its configuration and memory", line, rec.Seq, rec.N)
			}
			s = &sequence{cfg: configIn(*rec.Config)}
			seqs[rec.Seq] = s
			m := memoryIn(c, *rec.Memory)
			d.Start = &m
		}
		if rec.N != s.n {
			return fmt.Errorf("line %d: sequence %s: decision %d follows %d", line, rec.Seq, rec.N, s.n-1)
		}
		s.n++
		snap, last, err := snapIn(c, rec.Snap, s.last)
		if err != nil {
			return fmt.Errorf("line %d: sequence %s decision %d: %w", line, rec.Seq, rec.N, err)
		}
		s.last, d.Config, d.Snapshot = last, s.cfg, snap
		if err := each(d); err != nil {
			return err
		}
	}
	return sc.Err()
}

func configIn(g goldenConfig) policy.Config {
	return policy.Config{Auto: g.Auto, Window: g.Window, MaxWindow: g.MaxWindow, HandBackAfter: time.Duration(g.HandBackAfter),
		AckEvery: time.Duration(g.AckEvery), Yield: g.Yield, TTFTSLO: time.Duration(g.TTFTSLO), Hedge: g.Hedge, HedgeMax: g.HedgeMax,
		PeekEvery: time.Duration(g.PeekEvery)}
}

// snapIn is a record's snapshot, last being the flights of the snapshot
// before in the sequence; it returns this one's.
func snapIn(c goldenClock, g goldenSnap, last goldenFlights) (policy.Snapshot, goldenFlights, error) {
	s := policy.Snapshot{Now: c.at(g.Now), Size: g.Size, Taken: g.Taken, Generating: g.Generating, Pulling: g.Pulling,
		Holds: policy.Holds{Stopping: g.Stopping, StoreFull: g.StoreFull, Breaker: g.Breaker},
		Load:  policy.LoadReading{Load: loadIn(g.Load), NotServed: g.NotServed, NoReader: g.CannotRead},
		Pace:  policy.PaceReading{Latency: time.Duration(g.Latency), LeastTTFT: time.Duration(g.LeastTTFT), Tokens: g.Tokens}}
	if g.Paused && !s.Holds.Pause().Paused {
		s.Holds.Breaker = "paused" // a first recording's: paused, for a reason it did not keep
	}
	switch {
	case g.CannotRead:
		s.Load.Err = errors.New(policy.NoMetricsReader)
	case g.LoadErr != "":
		s.Load.Err = errors.New(g.LoadErr)
	}
	for _, gl := range g.Lanes {
		l := policy.Lane{MaxDeliver: gl.MaxDeliver, ConsumerFull: gl.ConsumerFull, Hedges: gl.Hedges,
			Holds:   policy.Holds{TailHold: gl.TailHold, HintHold: gl.HintHold, RunPaused: gl.RunPaused, RunGone: gl.RunGone},
			Lengths: undeltas(gl.Lengths), HintError: float64(gl.HintError), NextHint: gl.NextHint, MeanHint: float64(gl.MeanHint), Bounced: gl.Bounced,
			Peers: policy.Peers{Free: gl.PeersFree, Workers: gl.PeerWorkers, Windows: gl.PeerWindows}}
		for _, o := range gl.Others {
			l.Peers.Pulling = append(l.Peers.Pulling, policy.Peer{Rate: float64(o[0]), InFlight: int(o[1]), Free: int(o[2]), Speed: float64(o[3]), HintError: float64(o[4])})
		}
		if k := gl.Consumer; k != nil {
			l.Consumer = &policy.Consumer{Durable: k.Durable, Pending: k.Pending, AckPending: k.AckPending, MaxAckPending: k.MaxAckPending,
				Delivered: k.Delivered, Filter: k.Filter}
		}
		for _, f := range gl.Hedgeable {
			l.Peers.Hedgeable = append(l.Peers.Hedgeable, policy.PeerFlight{Flight: schema.Flight{Seq: f.Seq, ID: f.ID, Sample: f.Sample, Tokens: f.Tokens,
				ElapsedMillis: f.Elapsed, Hint: f.Hint, Hedged: f.Hedged}, Worker: f.Worker, Speed: float64(f.Speed), Age: time.Duration(f.Age)})
		}
		s.Lanes = append(s.Lanes, l)
	}
	var prev int64
	now := goldenFlights{}
	for _, a := range g.Flights {
		gf, err := last.decode(a, prev)
		if err != nil {
			return s, nil, err
		}
		now[gf.key()], prev = gf, gf.seq
		f := policy.Flight{Key: policy.FlightKey{Seq: uint64(gf.seq)}, Lane: int(gf.lane), State: policy.FlightState(gf.state), Tokens: gf.tokens,
			Hint: int(gf.hint), Attempt: int(gf.attempt), Last: gf.flags&1 != 0, Group: gf.flags&4 != 0}
		switch {
		case gf.flags&8 != 0:
			f.Key.Kind, f.Key.Sample = policy.SampleOf, int(gf.sample)
		case gf.flags&2 != 0:
			f.Key.Kind = policy.HedgeOf
		}
		if gf.sent != unsent {
			f.Sent = c.at(gf.sent)
		}
		s.Flights = append(s.Flights, f)
	}
	return s, now, nil
}

func memoryIn(c goldenClock, g goldenMemory) policy.Memory {
	m := policy.Memory{NextAck: c.atOpt(g.NextAck), FullStreak: slices.Clone(g.FullStreak), Speed: float64(g.Speed), SpeedTokens: g.SpeedTokens, SpeedAt: c.atOpt(g.SpeedAt)}
	m.Rule = policy.WindowRule{Max: g.RuleMax, Prev: loadIn(g.RulePrev), Ceiling: float64(g.Ceiling)}
	m.Load = policy.LoadMemory{Read: g.Read, Failures: g.Failures, Fixed: g.Fixed}
	m.Yield = policy.YieldMemory{Cap: g.Cap, Clear: g.Clear, Lowered: c.atOpt(g.Lowered), Batch: float64(g.Batch), OthersSeen: c.atOpt(g.OthersSeen)}
	for _, h := range g.History {
		t := policy.TTFTReading{At: c.at(h.At)}
		for _, b := range h.Buckets {
			t.Buckets = append(t.Buckets, policy.Bucket{LE: float64(b[0]), Count: float64(b[1])})
		}
		m.Yield.History = append(m.Yield.History, t)
	}
	for _, p := range g.PeekAfter {
		m.PeekAfter = append(m.PeekAfter, c.atOpt(p))
	}
	return m
}

func loadIn(g *goldenLoad) *policy.Load {
	if g == nil {
		return nil
	}
	l := &policy.Load{Running: float64(g.Running), Waiting: float64(g.Waiting), KVUsage: float64(g.KVUsage), Preemptions: float64(g.Preemptions)}
	for _, b := range g.TTFT {
		l.TTFT = append(l.TTFT, policy.Bucket{LE: float64(b[0]), Count: float64(b[1])})
	}
	return l
}

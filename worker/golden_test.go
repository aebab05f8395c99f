package worker

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// goldenFile holds every decision the workers made during one run of
// BenchmarkTwoBackendsMakespan and BenchmarkLongestFirst: what each saw,
// what it remembered, and the plan and memory it made. To record it
// again, on purpose, after a change of policy:
//
//	AERIE_RECORD_DECISIONS=$PWD/decisions.jsonl AERIE_RECORD_LABEL=makespan- \
//	    go test -run '^$' -bench '^BenchmarkTwoBackendsMakespan$' -benchtime 1x ./worker/
//	AERIE_RECORD_DECISIONS=$PWD/decisions.jsonl AERIE_RECORD_LABEL=order- AERIE_MAKESPAN_SPEED=1 \
//	    go test -run '^$' -bench '^BenchmarkLongestFirst$' -benchtime 1x ./worker/
//	gzip -9 < decisions.jsonl > worker/testdata/decisions.jsonl.gz
const goldenFile = "testdata/decisions.jsonl.gz"

func init() {
	path := os.Getenv("AERIE_RECORD_DECISIONS")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	g := &goldenRecorder{f: f, label: os.Getenv("AERIE_RECORD_LABEL"), seqs: map[*Worker]*goldenSeq{}}
	recordDecision = g.record
}

type goldenRecorder struct {
	mu    sync.Mutex
	f     *os.File
	label string
	seqs  map[*Worker]*goldenSeq
}

type goldenSeq struct {
	id    string
	clock goldenClock
	n     int
	last  goldenFlights
}

func (g *goldenRecorder) record(w *Worker, p policy, r readings, in memory) func(plan, memory) {
	g.mu.Lock()
	s := g.seqs[w]
	first := s == nil
	if first {
		s = &goldenSeq{id: fmt.Sprintf("%s%d", g.label, len(g.seqs)), clock: goldenClock{epoch: r.now}}
		g.seqs[w] = s
	}
	n := s.n
	s.n++
	g.mu.Unlock()
	rec := goldenRecord{Seq: s.id, Worker: w.cfg.Name, N: n}
	rec.Snap, s.last = snapOut(s.clock, r, s.last) // by w's decision goroutine alone
	if first {
		c := goldenConfig{Auto: p.auto, Window: p.window, MaxWindow: p.maxWindow, HandBack: p.handBack,
			HandBackAfter: int64(w.cfg.HandBackAfter), AckEvery: int64(p.ackEvery), Yield: p.yield, TTFTSLO: int64(p.ttftSLO),
			Hedge: p.hedge, HedgeMax: p.hedgeMax, PeekEvery: int64(hintlessPeekEvery * w.cfg.WindowPoll)}
		m := memoryOut(s.clock, in, nil)
		rec.Config, rec.Memory = &c, &m
	}
	return func(pl plan, m memory) {
		peek := make([]time.Time, len(r.lanes))
		for i, lr := range r.lanes {
			peek[i] = lr.lane.peekAfter
		}
		rec.Plan = planOut(pl, r)
		rec.Next = memoryOut(s.clock, m, peek)
		line, err := json.Marshal(rec)
		if err != nil {
			panic(err)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if _, err := g.f.Write(append(line, '\n')); err != nil {
			panic(err)
		}
	}
}

// snapOut is r's record, last being the flights of the snapshot before
// in the sequence; it returns this one's.
func snapOut(c goldenClock, r readings, last goldenFlights) (goldenSnap, goldenFlights) {
	g := goldenSnap{Now: c.ns(r.now), Size: r.size, Taken: r.taken, Generating: r.generating, Pulling: r.pulling, Paused: r.paused,
		Load: loadOut(r.load), NotServed: r.loadNotServed, Latency: int64(r.ownLatency), LeastTTFT: int64(r.leastTTFT), Tokens: r.tokens}
	if r.loadErr != nil {
		g.LoadErr = r.loadErr.Error()
		g.CannotRead = errors.Is(r.loadErr, errCannotReadMetrics)
	}
	lanesOut(&g, r)
	var prev int64
	now := goldenFlights{}
	for _, fv := range r.flights {
		seq, kind, sample := keyOrder(fv.key)
		gf := goldenFlight{seq: int64(seq), sample: int64(sample), state: int64(fv.state), tokens: fv.tokens,
			hint: int64(fv.f.hint), attempt: int64(fv.f.attempt), sent: unsent}
		if fv.f.last {
			gf.flags |= 1
		}
		if fv.f.hedge {
			gf.flags |= 2
		}
		if fv.f.group {
			gf.flags |= 4
		}
		if kind == 1 {
			gf.flags |= 8
		}
		if !fv.sent.IsZero() {
			gf.sent = c.ns(fv.sent)
		}
		gf.lane = int64(slices.IndexFunc(r.lanes, func(lr laneReading) bool { return lr.lane == fv.lane }))
		g.Flights = append(g.Flights, last.encode(gf, prev))
		now[gf.key()] = gf
		prev = gf.seq
	}
	return g, now
}

func lanesOut(g *goldenSnap, r readings) {
	for _, lr := range r.lanes {
		gl := goldenLane{MaxDeliver: lr.lane.maxDeliver, PeersFree: lr.peersFree, PeerWorkers: lr.peerWorkers, PeerWindows: lr.peerWindows,
			TailHold: lr.tailHold, ConsumerFull: lr.consumerFull, Hedges: lr.hedges, Lengths: deltas(lr.lengths),
			HintError: jf(lr.hintError), NextHint: lr.nextHint, MeanHint: jf(lr.meanHint), Bounced: lr.bounced}
		if len(lr.lengths) == 0 {
			gl.Lengths = nil
		}
		for _, o := range lr.others {
			gl.Others = append(gl.Others, [5]jf{jf(o.rate), jf(o.inFlight), jf(o.free), jf(o.speed), jf(o.hintError)})
		}
		if c := lr.consumer; c != nil {
			gl.Consumer = &goldenConsumer{Durable: c.durable, Pending: c.pending, AckPending: c.ackPending, MaxAckPending: c.maxAckPending,
				Delivered: c.delivered, Filter: c.filter}
		}
		for _, f := range lr.hedgeable {
			gl.Hedgeable = append(gl.Hedgeable, goldenPeerFl{Seq: f.Seq, ID: f.ID, Sample: f.Sample, Tokens: f.Tokens, Elapsed: f.ElapsedMillis,
				Hint: f.Hint, Hedged: f.Hedged, Worker: f.worker, Speed: jf(f.speed), Age: int64(f.age)})
		}
		g.Lanes = append(g.Lanes, gl)
	}
}

func planOut(pl plan, r readings) goldenPlan {
	g := goldenPlan{Size: pl.window.size, Why: pl.window.why, Retire: pl.retire, Cap: pl.yield.cap, CapWhy: pl.yield.why, P95: int64(pl.yield.p95)}
	if fb := pl.window.fallBack; fb != nil {
		e := ""
		if fb.err != nil {
			e = fb.err.Error()
		}
		g.FallBack = &[2]string{fb.why, e}
	}
	if pl.window.kept != nil {
		g.Kept = pl.window.kept.Error()
	}
	flightIndex := func(f *flight) int { return slices.IndexFunc(r.flights, func(fv flightView) bool { return fv.f == f }) }
	for i, lp := range pl.lanes {
		gp := goldenLanePlan{Hold: lp.hold, Pending: lp.pending, IdleSlots: lp.idleSlots, Full: int(lp.full),
			HintLimit: jf(lp.hintLimit), HintHold: lp.hintHold}
		if lp.full == fullSet {
			gp.Need, gp.Workers, gp.Windows = lp.need, lp.workers, lp.windows
		}
		for _, w := range lp.handBack {
			gp.HandBack = append(gp.HandBack, flightIndex(w.f))
		}
		for _, f := range lp.slowBack {
			gp.SlowBack = append(gp.SlowBack, flightIndex(f))
		}
		for _, h := range lp.hedges {
			gp.Hedges = append(gp.Hedges, slices.Index(r.lanes[i].hedgeable, h))
		}
		g.Lanes = append(g.Lanes, gp)
	}
	return g
}

func memoryOut(c goldenClock, m memory, peek []time.Time) goldenMemory {
	g := goldenMemory{RuleMax: m.rule.Max, RulePrev: loadOut(m.rule.prev), Ceiling: jf(m.rule.ceiling),
		Read: m.load.read, Failures: m.load.failures, Fixed: m.load.fixed,
		Cap: m.yield.cap, Clear: m.yield.clear, Lowered: c.opt(m.yield.lowered), Batch: jf(m.yield.batch), OthersSeen: c.opt(m.yield.othersSeen),
		NextAck: c.opt(m.nextAck), FullStreak: slices.Clone(m.fullStreak), Speed: jf(m.speed), SpeedTokens: m.speedTokens, SpeedAt: c.opt(m.speedAt)}
	for _, h := range m.yield.history {
		t := goldenTTF{At: c.ns(h.at)}
		for _, b := range h.buckets {
			t.Buckets = append(t.Buckets, [2]jf{jf(b.le), jf(b.count)})
		}
		g.History = append(g.History, t)
	}
	for _, t := range peek {
		g.PeekAfter = append(g.PeekAfter, c.opt(t))
	}
	return g
}

// snapIn is a record's snapshot made into readings again, with the
// lanes and flights it names, last being the flights of the snapshot
// before in the sequence; it returns this one's.
func snapIn(c goldenClock, cfg goldenConfig, g goldenSnap, last goldenFlights) (readings, goldenFlights, error) {
	r := readings{now: c.at(g.Now), size: g.Size, taken: g.Taken, generating: g.Generating, pulling: g.Pulling, paused: g.Paused,
		load: loadIn(g.Load), loadNotServed: g.NotServed, ownLatency: time.Duration(g.Latency), leastTTFT: time.Duration(g.LeastTTFT), tokens: g.Tokens}
	r.handBackWait = max(time.Duration(cfg.HandBackAfter), ttfFactor*r.leastTTFT)
	switch {
	case g.CannotRead:
		r.loadErr = errCannotReadMetrics
	case g.LoadErr != "":
		r.loadErr = errors.New(g.LoadErr)
	}
	for _, gl := range g.Lanes {
		lr := laneReading{lane: &lane{maxDeliver: gl.MaxDeliver}, peersFree: gl.PeersFree, peerWorkers: gl.PeerWorkers, peerWindows: gl.PeerWindows,
			tailHold: gl.TailHold, consumerFull: gl.ConsumerFull, hedges: gl.Hedges, lengths: undeltas(gl.Lengths),
			hintError: float64(gl.HintError), nextHint: gl.NextHint, meanHint: float64(gl.MeanHint), bounced: gl.Bounced}
		for _, o := range gl.Others {
			lr.others = append(lr.others, tailPeer{rate: float64(o[0]), inFlight: int(o[1]), free: int(o[2]), speed: float64(o[3]), hintError: float64(o[4])})
		}
		if gc := gl.Consumer; gc != nil {
			lr.consumer = &consumerReading{durable: gc.Durable, pending: gc.Pending, ackPending: gc.AckPending, maxAckPending: gc.MaxAckPending,
				delivered: gc.Delivered, filter: gc.Filter}
		}
		for _, f := range gl.Hedgeable {
			lr.hedgeable = append(lr.hedgeable, peerFlight{Flight: schema.Flight{Seq: f.Seq, ID: f.ID, Sample: f.Sample, Tokens: f.Tokens,
				ElapsedMillis: f.Elapsed, Hint: f.Hint, Hedged: f.Hedged}, worker: f.Worker, speed: float64(f.Speed), age: time.Duration(f.Age)})
		}
		r.lanes = append(r.lanes, lr)
	}
	var prev int64
	now := goldenFlights{}
	for _, a := range g.Flights {
		gf, err := last.decode(a, prev)
		if err != nil {
			return r, nil, err
		}
		now[gf.key()], prev = gf, gf.seq
		seq := uint64(gf.seq)
		l := r.lanes[gf.lane].lane
		f := &flight{lane: l, last: gf.flags&1 != 0, hedge: gf.flags&2 != 0, group: gf.flags&4 != 0, hint: int(gf.hint), attempt: int(gf.attempt), seq: seq}
		var key any = seq
		switch {
		case gf.flags&8 != 0:
			key = sampleKey{seq, int(gf.sample)}
		case f.hedge:
			key = hedgeKey(seq)
		}
		fv := flightView{f: f, lane: l, key: key, state: int32(gf.state), tokens: gf.tokens}
		if gf.sent != unsent {
			fv.sent = c.at(gf.sent)
		}
		r.flights = append(r.flights, fv)
	}
	r.decoding, r.firstSpeed = streaming(r.flights, r.now)
	if cfg.HandBack {
		waiting := waitingFlights(r.flights, r.now.Add(-r.handBackWait))
		for i := range r.lanes {
			r.lanes[i].waiting = waiting[r.lanes[i].lane]
		}
	}
	return r, now, nil
}

func memoryIn(c goldenClock, g goldenMemory) memory {
	m := memory{nextAck: c.atOpt(g.NextAck), fullStreak: slices.Clone(g.FullStreak), speed: float64(g.Speed), speedTokens: g.SpeedTokens, speedAt: c.atOpt(g.SpeedAt)}
	m.rule = windowRule{Max: g.RuleMax, prev: loadIn(g.RulePrev), ceiling: float64(g.Ceiling)}
	m.load = loadMemory{read: g.Read, failures: g.Failures, fixed: g.Fixed}
	m.yield = yieldMemory{cap: g.Cap, clear: g.Clear, lowered: c.atOpt(g.Lowered), batch: float64(g.Batch), othersSeen: c.atOpt(g.OthersSeen)}
	for _, h := range g.History {
		t := ttftReading{at: c.at(h.At)}
		for _, b := range h.Buckets {
			t.buckets = append(t.buckets, bucket{le: float64(b[0]), count: float64(b[1])})
		}
		m.yield.history = append(m.yield.history, t)
	}
	return m
}

// TestGoldenDecisions replays every recorded decision through the pull
// decision and checks that it makes the recorded plan and memory, each
// decision of a worker from the memory the one before it made. A change
// of policy that changes a decision must record the file again (see
// goldenFile) and say why.
func TestGoldenDecisions(t *testing.T) {
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	type sequence struct {
		cfg  goldenConfig
		p    policy
		m    memory
		peek []time.Time
		n    int
		last goldenFlights
	}
	seqs := map[string]*sequence{}
	c := goldenClock{epoch: goldenEpoch}
	decisions, plans := 0, map[string]int{}
	for sc.Scan() {
		var rec goldenRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("record %d: %v", decisions+1, err)
		}
		s := seqs[rec.Seq]
		if s == nil {
			if rec.Config == nil || rec.Memory == nil || rec.N != 0 {
				t.Fatalf("sequence %s starts at decision %d without its configuration and memory", rec.Seq, rec.N)
			}
			cfg := *rec.Config
			s = &sequence{cfg: cfg, m: memoryIn(c, *rec.Memory),
				p: policy{auto: cfg.Auto, window: cfg.Window, maxWindow: cfg.MaxWindow, handBack: cfg.HandBack, ackEvery: time.Duration(cfg.AckEvery),
					yield: cfg.Yield, ttftSLO: time.Duration(cfg.TTFTSLO), hedge: cfg.Hedge, hedgeMax: cfg.HedgeMax}}
			seqs[rec.Seq] = s
		}
		if rec.N != s.n {
			t.Fatalf("sequence %s: decision %d follows %d", rec.Seq, rec.N, s.n-1)
		}
		s.n++
		decisions++
		r, last, err := snapIn(c, s.cfg, rec.Snap, s.last)
		if err != nil {
			t.Fatalf("sequence %s decision %d: %v", rec.Seq, rec.N, err)
		}
		s.last = last
		pl, m := planPulls(s.p, r, s.m)
		s.m = m
		// What observe remembers of a reading of hints that found none.
		for len(s.peek) < len(r.lanes) {
			s.peek = append(s.peek, time.Time{})
		}
		for i, lr := range r.lanes {
			if lr.nextHint == 0 && lr.meanHint == 0 {
				s.peek[i] = r.now.Add(time.Duration(s.cfg.PeekEvery))
			}
		}
		got, want := planOut(pl, r), rec.Plan
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(want)
		if string(gotJSON) != string(wantJSON) {
			t.Fatalf("sequence %s (%s) decision %d: plan\n%s\nwant\n%s", rec.Seq, rec.Worker, rec.N, gotJSON, wantJSON)
		}
		gotM, _ := json.Marshal(memoryOut(c, m, s.peek))
		wantM, _ := json.Marshal(rec.Next)
		if string(gotM) != string(wantM) {
			t.Fatalf("sequence %s (%s) decision %d: memory\n%s\nwant\n%s", rec.Seq, rec.Worker, rec.N, gotM, wantM)
		}
		plans[planKind(got)]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if decisions == 0 {
		t.Fatal("no decisions recorded")
	}
	t.Logf("%d decisions of %d workers replayed; plans that %v", decisions, len(seqs), plans)
}

// planKind names what a plan does, for the replay's tally.
func planKind(g goldenPlan) string {
	var does []string
	if g.Size > 0 {
		does = append(does, "resize")
	}
	if g.Retire > 0 {
		does = append(does, "retire")
	}
	for _, l := range g.Lanes {
		if l.Hold {
			does = append(does, "hold")
		}
		if len(l.HandBack) > 0 {
			does = append(does, "hand back")
		}
		if len(l.SlowBack) > 0 {
			does = append(does, "hand back slow")
		}
		if len(l.Hedges) > 0 {
			does = append(does, "hedge")
		}
		if l.HintHold {
			does = append(does, "hint hold")
		}
		if l.Full != 0 {
			does = append(does, "consumer full")
		}
	}
	if len(does) == 0 {
		return "keep"
	}
	return fmt.Sprint(does)
}

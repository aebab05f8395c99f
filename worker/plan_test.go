package worker

import (
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSizeWindow(t *testing.T) {
	auto := policy{auto: true, window: 200, maxWindow: 500}
	readErr := errors.New("connection refused")
	free := &backendLoad{Running: 200, KVUsage: 0.3}
	for _, c := range []struct {
		name  string
		p     policy
		r     readings
		m     loadMemory
		want  windowDecision
		wantM loadMemory
	}{
		{"a fixed window is left alone", policy{window: 200}, readings{size: 200, generating: 200, load: free}, loadMemory{}, windowDecision{}, loadMemory{}},
		{"grows by the rule", auto, readings{size: 200, generating: 200, load: free}, loadMemory{}, windowDecision{size: 300, why: "free slots"}, loadMemory{read: true}},
		{"unchanged by the rule", auto, readings{size: 200, generating: 100, load: free}, loadMemory{read: true}, windowDecision{}, loadMemory{read: true}},
		{"nothing read", auto, readings{size: 200}, loadMemory{}, windowDecision{}, loadMemory{}},
		{"a failed reading before any is counted", auto, readings{size: 200, loadErr: readErr}, loadMemory{failures: 1}, windowDecision{}, loadMemory{failures: 2}},
		{"falls back after fallbackAfter failures", auto, readings{size: 300, loadErr: readErr}, loadMemory{failures: fallbackAfter - 1},
			windowDecision{size: 200, fallBack: &fallBack{why: "the backend serves no vLLM load metrics at /metrics", err: readErr}}, loadMemory{failures: fallbackAfter, fixed: true}},
		{"falls back at once when no metrics are served", auto, readings{size: 200, loadErr: errNoLoadMetrics, loadNotServed: true}, loadMemory{},
			windowDecision{size: 200, fallBack: &fallBack{why: "the backend serves no vLLM load metrics at /metrics", err: errNoLoadMetrics}}, loadMemory{failures: 1, fixed: true}},
		{"a backend that cannot read metrics", auto, readings{size: 200, loadErr: errCannotReadMetrics, loadNotServed: true}, loadMemory{},
			windowDecision{size: 200, fallBack: &fallBack{why: errCannotReadMetrics.Error()}}, loadMemory{failures: 1, fixed: true}},
		{"a failure after a good reading keeps the window", auto, readings{size: 250, loadErr: readErr}, loadMemory{read: true}, windowDecision{kept: readErr}, loadMemory{read: true}},
		{"fallen back for good", auto, readings{size: 200, load: free}, loadMemory{fixed: true}, windowDecision{}, loadMemory{fixed: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, m := sizeWindow(c.p, c.r, memory{load: c.m})
			if got.size != c.want.size || got.why != c.want.why || got.kept != c.want.kept ||
				(got.fallBack == nil) != (c.want.fallBack == nil) || got.fallBack != nil && *got.fallBack != *c.want.fallBack {
				t.Errorf("decision %+v (fall back %+v), want %+v (fall back %+v)", got, got.fallBack, c.want, c.want.fallBack)
			}
			if m.load != c.wantM {
				t.Errorf("memory %+v, want %+v", m.load, c.wantM)
			}
		})
	}
}

// flights returns n waiting requests sent a second apart, the oldest
// first.
func flights(n int) []waitingFlight {
	out := make([]waitingFlight, n)
	for i := range out {
		out[i] = waitingFlight{f: &flight{}, sent: t0.Add(time.Duration(i) * time.Second)}
	}
	return out
}

func TestTailPolicy(t *testing.T) {
	fixed := policy{window: 8, handBack: true}
	fast := tailPeer{rate: 13.2, inFlight: 384}
	three := flights(3)
	for _, c := range []struct {
		name string
		p    policy
		r    readings
		want tailDecision
		// handed are the indexes in three of the requests handed back.
		handed []int
	}{
		{"nothing to decide without waiting requests or pulling peers",
			fixed, readings{size: 8, ownLatency: time.Second, lanes: []laneReading{{}}}, tailDecision{}, nil},
		{"no consumer read: no hold",
			fixed, readings{size: 8, ownLatency: 88 * time.Second, lanes: []laneReading{{others: []tailPeer{fast}}}}, tailDecision{}, nil},
		{"holds back near the end for faster peers",
			fixed, readings{size: 8, ownLatency: 88 * time.Second, lanes: []laneReading{{others: []tailPeer{fast}, consumer: &consumerReading{pending: 500}}}},
			tailDecision{hold: true, pending: 500}, nil},
		{"pulls early in the run",
			fixed, readings{size: 8, ownLatency: 88 * time.Second, lanes: []laneReading{{others: []tailPeer{fast}, consumer: &consumerReading{pending: 3000}}}},
			tailDecision{pending: 3000}, nil},
		{"hands back the youngest for idle peers",
			fixed, readings{size: 8, taken: 3, lanes: []laneReading{{waiting: three, peersFree: 2, consumer: &consumerReading{}}}},
			tailDecision{retire: 2, idleSlots: 2}, []int{2, 1}},
		{"no more than the waiting requests",
			fixed, readings{size: 8, taken: 3, lanes: []laneReading{{waiting: three, peersFree: 10, consumer: &consumerReading{}}}},
			tailDecision{retire: 3, idleSlots: 10}, []int{2, 1, 0}},
		{"retires but hands back nothing while a pull is open",
			fixed, readings{size: 8, taken: 3, pulling: true, lanes: []laneReading{{waiting: three, peersFree: 2, consumer: &consumerReading{}}}},
			tailDecision{retire: 2, idleSlots: 2}, nil},
		{"no idle peer, no hand-back",
			fixed, readings{size: 8, taken: 3, lanes: []laneReading{{waiting: three, consumer: &consumerReading{}}}},
			tailDecision{}, nil},
		{"prompts left to deliver: no hand-back",
			fixed, readings{size: 8, taken: 3, lanes: []laneReading{{waiting: three, peersFree: 2, consumer: &consumerReading{pending: 4}}}},
			tailDecision{pending: 4}, nil},
		{"a shrunk fixed window comes back when prompts come again",
			fixed, readings{size: 5, lanes: []laneReading{{consumer: &consumerReading{pending: 4}}}},
			tailDecision{pending: 4, restore: true}, nil},
		{"an automatic window is never restored",
			policy{auto: true, window: 8}, readings{size: 5, lanes: []laneReading{{consumer: &consumerReading{pending: 4}}}},
			tailDecision{}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := tailPolicy(c.p, c.r, 0)
			var handed []int
			for _, f := range got.handBack {
				handed = append(handed, slices.IndexFunc(three, func(w waitingFlight) bool { return w.f == f.f }))
			}
			if got.hold != c.want.hold || got.pending != c.want.pending || got.restore != c.want.restore ||
				got.retire != c.want.retire || got.idleSlots != c.want.idleSlots || !slices.Equal(handed, c.handed) {
				t.Errorf("got %+v handing back %v, want %+v handing back %v", got, handed, c.want, c.handed)
			}
		})
	}
}

func TestAckRoomPolicy(t *testing.T) {
	full := &consumerReading{durable: "workers-r", pending: 10, ackPending: 4, maxAckPending: 4}
	room := &consumerReading{durable: "workers-r", pending: 10, ackPending: 2, maxAckPending: 4}
	for _, c := range []struct {
		name       string
		r          readings
		streak     int
		wantStreak int
		want       fullChange
		need       int
	}{
		{"full once is not enough", readings{size: 4, lanes: []laneReading{{consumer: full}}}, 0, 1, fullKeep, 0},
		{"full twice running is reported", readings{size: 4, lanes: []laneReading{{consumer: full, peerWorkers: 1, peerWindows: 4}}}, 1, 2, fullSet, 16},
		{"the fix is at least twice the limit", readings{size: 1, lanes: []laneReading{{consumer: full}}}, 1, 2, fullSet, 8},
		{"reported once", readings{size: 4, lanes: []laneReading{{consumer: full, consumerFull: true}}}, 2, 3, fullKeep, 0},
		{"room again clears it", readings{size: 4, lanes: []laneReading{{consumer: room, consumerFull: true}}}, 3, 0, fullClear, 0},
		{"room while not full changes nothing", readings{size: 4, lanes: []laneReading{{consumer: room}}}, 1, 0, fullKeep, 0},
		{"nothing waiting is not full", readings{size: 4, lanes: []laneReading{{consumer: &consumerReading{ackPending: 4, maxAckPending: 4}}}}, 1, 0, fullKeep, 0},
		{"no limit is never full", readings{size: 4, lanes: []laneReading{{consumer: &consumerReading{pending: 9, ackPending: 4}}}}, 1, 0, fullKeep, 0},
		{"a paused worker does not look", readings{size: 4, paused: true, lanes: []laneReading{{consumer: full}}}, 1, 0, fullKeep, 0},
		{"nor one without a free slot", readings{size: 4, generating: 4, lanes: []laneReading{{consumer: full}}}, 1, 0, fullKeep, 0},
		{"nor one holding back for the tail", readings{size: 4, lanes: []laneReading{{consumer: full, tailHold: true}}}, 1, 0, fullKeep, 0},
		{"nor one that could not read it, and the state stays", readings{size: 4, lanes: []laneReading{{consumerFull: true}}}, 2, 0, fullKeep, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var lp lanePlan
			streak := ackRoomPolicy(c.r, 0, c.streak, &lp)
			if streak != c.wantStreak || lp.full != c.want || lp.need != c.need {
				t.Errorf("streak %d, change %d, need %d; want %d, %d, %d", streak, lp.full, lp.need, c.wantStreak, c.want, c.need)
			}
		})
	}
}

func TestWantsConsumer(t *testing.T) {
	p := policy{window: 8, ackEvery: 10 * time.Second}
	later := memory{nextAck: t0.Add(time.Second)}
	due := memory{nextAck: t0}
	for _, c := range []struct {
		name string
		r    readings
		m    memory
		want bool
	}{
		{"an idle worker alone reads nothing", readings{now: t0, size: 8, lanes: []laneReading{{}}}, later, false},
		{"requests that may be handed back", readings{now: t0, size: 8, lanes: []laneReading{{waiting: flights(1)}}}, later, true},
		{"a window shrunk by a hand-back", readings{now: t0, size: 6, lanes: []laneReading{{}}}, later, true},
		{"peers pulling and a known pace", readings{now: t0, size: 8, ownLatency: time.Second, lanes: []laneReading{{others: []tailPeer{{}}}}}, later, true},
		{"peers pulling before the first answer", readings{now: t0, size: 8, lanes: []laneReading{{others: []tailPeer{{}}}}}, later, false},
		{"the look for room is due", readings{now: t0, size: 8, lanes: []laneReading{{}}}, due, true},
		{"but not for a worker with no free slot", readings{now: t0, size: 8, generating: 8, lanes: []laneReading{{}}}, due, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := wantsConsumer(p, &c.r, 0, &c.m); got != c.want {
				t.Errorf("wantsConsumer = %v, want %v", got, c.want)
			}
		})
	}
}

func TestPlanPulls(t *testing.T) {
	p := policy{window: 8, handBack: true, ackEvery: 10 * time.Second}
	full := &consumerReading{pending: 10, ackPending: 4, maxAckPending: 4}
	t.Run("looks for room only when due, and remembers the streak", func(t *testing.T) {
		m := memory{nextAck: t0.Add(time.Second)}
		r := readings{now: t0, size: 8, lanes: []laneReading{{consumer: full}}}
		pl, m := planPulls(p, r, m)
		if pl.lanes[0].full != fullKeep || m.fullStreak[0] != 0 || !m.nextAck.Equal(t0.Add(time.Second)) {
			t.Fatalf("not due: change %d, streak %v, next %v", pl.lanes[0].full, m.fullStreak, m.nextAck)
		}
		for i, want := range []fullChange{fullKeep, fullSet} {
			r.now = m.nextAck
			pl, m = planPulls(p, r, m)
			if pl.lanes[0].full != want || m.fullStreak[0] != i+1 || !m.nextAck.Equal(r.now.Add(p.ackEvery)) {
				t.Fatalf("look %d: change %d, streak %v, next %v", i+1, pl.lanes[0].full, m.fullStreak, m.nextAck)
			}
		}
	})
	t.Run("hand-backs of several runs retire together", func(t *testing.T) {
		lane := laneReading{waiting: flights(2), peersFree: 1, consumer: &consumerReading{}}
		r := readings{now: t0, size: 8, taken: 4, lanes: []laneReading{lane, lane}}
		pl, _ := planPulls(p, r, memory{nextAck: t0.Add(time.Hour)})
		if pl.retire != 2 || len(pl.lanes[0].handBack) != 1 || len(pl.lanes[1].handBack) != 1 {
			t.Fatalf("retire %d, hand-backs %d and %d; want 2, 1 and 1", pl.retire, len(pl.lanes[0].handBack), len(pl.lanes[1].handBack))
		}
	})
	t.Run("the fixed window comes back when prompts come again", func(t *testing.T) {
		r := readings{now: t0, size: 5, lanes: []laneReading{{consumer: &consumerReading{pending: 3}}}}
		pl, _ := planPulls(p, r, memory{nextAck: t0.Add(time.Hour)})
		if pl.window.size != 8 || pl.window.why != "prompts came again" {
			t.Fatalf("window %+v, want 8", pl.window)
		}
	})
	t.Run("the automatic window's size is the rule's", func(t *testing.T) {
		auto := p
		auto.auto, auto.maxWindow = true, 500
		r := readings{now: t0, size: 8, generating: 8, load: &backendLoad{Running: 8}, lanes: []laneReading{{}}}
		pl, m := planPulls(auto, r, memory{nextAck: t0.Add(time.Hour)})
		if pl.window.size != 12 || m.rule.prev == nil || !m.load.read {
			t.Fatalf("window %+v, memory %+v; want 12 and the reading remembered", pl.window, m)
		}
	})
}

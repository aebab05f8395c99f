// Package policytest reads and writes recordings of a worker's
// decisions: what each saw, what it remembered, and the plan and memory
// it made. A worker's test records them (see Recorder) as it runs a
// benchmark; the policy's test replays them (see Replay) through Decide.
package policytest

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// The file format: one JSON line per decision, in the order each worker
// made them. A worker's decisions form a sequence; its
// first record carries the configuration and the memory the worker
// started with, and every record the snapshot, the plan and the memory
// after. Times are nanoseconds from the sequence's first snapshot (so
// that replaying keeps every difference between them exact), floats
// that may be infinite are strings, and requests are keyed by their
// prompt's stream sequence.

type goldenRecord struct {
	Seq    string        `json:"seq"`
	Worker string        `json:"worker"`
	N      int           `json:"n"`
	Config *goldenConfig `json:"config,omitempty"`
	Memory *goldenMemory `json:"memory,omitempty"`
	Snap   goldenSnap    `json:"snapshot"`
	Plan   goldenPlan    `json:"plan"`
	Next   goldenMemory  `json:"next"`
}

type goldenConfig struct {
	Auto          bool  `json:"auto,omitempty"`
	Window        int   `json:"window"`
	MaxWindow     int   `json:"max_window"`
	HandBack      bool  `json:"hand_back,omitempty"`
	HandBackAfter int64 `json:"hand_back_after"`
	AckEvery      int64 `json:"ack_every"`
	Yield         bool  `json:"yield,omitempty"`
	TTFTSLO       int64 `json:"ttft_slo,omitempty"`
	Hedge         bool  `json:"hedge,omitempty"`
	HedgeMax      int   `json:"hedge_max,omitempty"`
	PeekEvery     int64 `json:"peek_every"`
}

type goldenSnap struct {
	Now        int64 `json:"now"`
	Size       int   `json:"size"`
	Taken      int   `json:"taken"`
	Generating int   `json:"generating"`
	Pulling    bool  `json:"pulling,omitempty"`
	// Paused: the worker's own holds keep it from every run (the only
	// thing first recordings knew of them); Stopping, StoreFull and
	// Breaker say which.
	Paused    bool        `json:"paused,omitempty"`
	Stopping  bool        `json:"stopping,omitempty"`
	StoreFull bool        `json:"store_full,omitempty"`
	Breaker   string      `json:"breaker,omitempty"`
	Load      *goldenLoad `json:"load,omitempty"`
	LoadErr   string      `json:"load_err,omitempty"`
	// NotServed: the backend serves no load metrics; CannotRead: it has
	// no way to read them.
	NotServed  bool  `json:"not_served,omitempty"`
	CannotRead bool  `json:"cannot_read,omitempty"`
	Latency    int64 `json:"latency"`
	LeastTTFT  int64 `json:"least_ttft"`
	Tokens     int64 `json:"tokens"`
	// Flights are in key order, each [seq delta, sample, flags, lane,
	// state, tokens, hint, attempt, sent or unsent]; flags: 1 last, 2 hedge,
	// 4 group, 8 a sample's own request. A flight the snapshot before
	// saw, sent at the same time, is [seq delta, sample, flags & 8,
	// state, tokens since].
	Flights [][]int64    `json:"flights,omitempty"`
	Lanes   []goldenLane `json:"lanes"`
}

type goldenLane struct {
	MaxDeliver   int             `json:"max_deliver"`
	Others       [][5]jf         `json:"others,omitempty"` // rate, in flight, free, speed, hints' error
	PeersFree    int             `json:"peers_free,omitempty"`
	PeerWorkers  int             `json:"peer_workers,omitempty"`
	PeerWindows  int             `json:"peer_windows,omitempty"`
	TailHold     bool            `json:"tail_hold,omitempty"`
	HintHold     bool            `json:"hint_hold,omitempty"`
	RunPaused    bool            `json:"run_paused,omitempty"`
	RunGone      bool            `json:"run_gone,omitempty"`
	ConsumerFull bool            `json:"consumer_full,omitempty"`
	Consumer     *goldenConsumer `json:"consumer,omitempty"`
	Hedgeable    []goldenPeerFl  `json:"hedgeable,omitempty"`
	Hedges       int             `json:"hedges,omitempty"`
	// Lengths are the sorted lengths as differences from the one before.
	Lengths   []int `json:"lengths,omitempty"`
	HintError jf    `json:"hint_error"`
	NextHint  int   `json:"next_hint"`
	MeanHint  jf    `json:"mean_hint"`
	Bounced   bool  `json:"bounced,omitempty"`
}

type goldenConsumer struct {
	Durable       string `json:"durable"`
	Pending       uint64 `json:"pending"`
	AckPending    int    `json:"ack_pending"`
	MaxAckPending int    `json:"max_ack_pending"`
	Delivered     uint64 `json:"delivered"`
	Filter        string `json:"filter,omitempty"`
}

type goldenPeerFl struct {
	Seq     uint64 `json:"seq"`
	ID      string `json:"id"`
	Sample  int    `json:"sample,omitempty"`
	Tokens  int    `json:"tokens"`
	Elapsed int64  `json:"elapsed_ms"`
	Hint    int    `json:"hint,omitempty"`
	Hedged  bool   `json:"hedged,omitempty"`
	Worker  string `json:"worker"`
	Speed   jf     `json:"speed"`
	Age     int64  `json:"age"`
}

type goldenLoad struct {
	Running     jf      `json:"running"`
	Waiting     jf      `json:"waiting"`
	KVUsage     jf      `json:"kv"`
	Preemptions jf      `json:"preemptions"`
	TTFT        [][2]jf `json:"ttft,omitempty"`
}

type goldenPlan struct {
	Size     int              `json:"size,omitempty"`
	Why      string           `json:"why,omitempty"`
	FallBack *[2]string       `json:"fall_back,omitempty"` // why, error
	Kept     string           `json:"kept,omitempty"`
	Retire   int              `json:"retire,omitempty"`
	Cap      int              `json:"cap,omitempty"`
	CapWhy   string           `json:"cap_why,omitempty"`
	P95      int64            `json:"p95"`
	Lanes    []goldenLanePlan `json:"lanes"`
}

type goldenLanePlan struct {
	Hold      bool   `json:"hold,omitempty"`
	Pending   uint64 `json:"pending,omitempty"`
	HandBack  []int  `json:"hand_back,omitempty"` // indexes in the snapshot's flights
	IdleSlots int    `json:"idle_slots,omitempty"`
	Full      int    `json:"full,omitempty"`
	Need      int    `json:"need,omitempty"`
	Workers   int    `json:"workers,omitempty"`
	Windows   int    `json:"windows,omitempty"`
	HintLimit jf     `json:"hint_limit"`
	HintHold  bool   `json:"hint_hold,omitempty"`
	Hedges    []int  `json:"hedges,omitempty"`    // indexes in the lane's hedgeable
	SlowBack  []int  `json:"slow_back,omitempty"` // indexes in the snapshot's flights
}

type goldenMemory struct {
	RuleMax     int         `json:"rule_max,omitempty"`
	RulePrev    *goldenLoad `json:"rule_prev,omitempty"`
	Ceiling     jf          `json:"ceiling"`
	Read        bool        `json:"read,omitempty"`
	Failures    int         `json:"failures,omitempty"`
	Fixed       bool        `json:"fixed,omitempty"`
	History     []goldenTTF `json:"history,omitempty"`
	Cap         int         `json:"cap,omitempty"`
	Clear       int         `json:"clear,omitempty"`
	Lowered     *int64      `json:"lowered,omitempty"`
	Batch       jf          `json:"batch"`
	OthersSeen  *int64      `json:"others_seen,omitempty"`
	NextAck     *int64      `json:"next_ack,omitempty"`
	FullStreak  []int       `json:"full_streak,omitempty"`
	Speed       jf          `json:"speed"`
	SpeedTokens int64       `json:"speed_tokens,omitempty"`
	SpeedAt     *int64      `json:"speed_at,omitempty"`
	PeekAfter   []*int64    `json:"peek_after,omitempty"`
}

type goldenTTF struct {
	At      int64   `json:"at"`
	Buckets [][2]jf `json:"buckets"`
}

// jf is a float64 that JSON carries exactly, infinities and NaN as
// strings.
type jf float64

func (f jf) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return json.Marshal(strconv.FormatFloat(v, 'g', -1, 64))
	}
	return []byte(strconv.FormatFloat(v, 'g', -1, 64)), nil
}

func (f *jf) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseFloat(s, 64)
		*f = jf(v)
		return err
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*f = jf(v)
	return err
}

// goldenClock turns the times of one sequence into nanoseconds from its
// first snapshot, and back.
type goldenClock struct{ epoch time.Time }

func (c goldenClock) ns(t time.Time) int64 { return int64(t.Sub(c.epoch)) }

func (c goldenClock) opt(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := c.ns(t)
	return &n
}

func (c goldenClock) at(ns int64) time.Time { return c.epoch.Add(time.Duration(ns)) }

func (c goldenClock) atOpt(ns *int64) time.Time {
	if ns == nil {
		return time.Time{}
	}
	return c.at(*ns)
}

// goldenEpoch is where replayed times start: any fixed time will do.
var goldenEpoch = time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)

func deltas(sorted []int) []int {
	out := make([]int, len(sorted))
	prev := 0
	for i, v := range sorted {
		out[i], prev = v-prev, v
	}
	return out
}

func undeltas(d []int) []int {
	if len(d) == 0 {
		return nil
	}
	out := make([]int, len(d))
	sum := 0
	for i, v := range d {
		sum += v
		out[i] = sum
	}
	return out
}

// unsent is the sent time of a flight whose request is not sent yet.
const unsent = math.MinInt64

// goldenFlight is one flight of a snapshot as the file knows it.
type goldenFlight struct {
	seq, sample, flags, lane, state, tokens, hint, attempt, sent int64
}

// key is what tells a flight from the others: its prompt's sequence,
// its sample and its kind (a delivery's, a sample's or a hedge's).
func (f goldenFlight) key() [3]int64 { return [3]int64{f.seq, f.sample, f.flags & (8 | 2)} }

// goldenFlights are the flights of a sequence's last snapshot by key:
// a flight seen there, sent at the same time, is written short.
type goldenFlights map[[3]int64]goldenFlight

// encode is f's record, prev being the sequence of the flight before it
// in the snapshot.
func (last goldenFlights) encode(f goldenFlight, prev int64) []int64 {
	o, ok := last[f.key()]
	if ok && o.sent != unsent && o.sent == f.sent && o.flags == f.flags && o.lane == f.lane && o.hint == f.hint && o.attempt == f.attempt {
		return []int64{f.seq - prev, f.sample, f.flags & (8 | 2), f.state, f.tokens - o.tokens}
	}
	return []int64{f.seq - prev, f.sample, f.flags, f.lane, f.state, f.tokens, f.hint, f.attempt, f.sent}
}

// decode is the flight of record a.
func (last goldenFlights) decode(a []int64, prev int64) (goldenFlight, error) {
	switch len(a) {
	case 9:
		return goldenFlight{seq: prev + a[0], sample: a[1], flags: a[2], lane: a[3], state: a[4], tokens: a[5], hint: a[6], attempt: a[7], sent: a[8]}, nil
	case 5:
		f, ok := last[[3]int64{prev + a[0], a[1], a[2]}]
		if !ok {
			return f, fmt.Errorf("flight %d sample %d written short, not in the snapshot before", prev+a[0], a[1])
		}
		f.state, f.tokens = a[3], f.tokens+a[4]
		return f, nil
	}
	return goldenFlight{}, fmt.Errorf("flight record %v: want 5 or 9 numbers", a)
}

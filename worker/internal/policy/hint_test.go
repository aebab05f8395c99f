package policy

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// A worker limits the hints it starts only when it knows itself slow: the
// fastest other worker streams each request at least slowFactor times as
// fast. The limit is what it can generate in the time the others need to
// work off the prompts left, over the hints' error: 0 until the others'
// pace is known.
func TestHintLimit(t *testing.T) {
	inf := math.Inf(1)
	peers := func(speed, rate float64) []Peer { return []Peer{{Speed: speed, Rate: rate, InFlight: 10}} }
	pending := func(n uint64) *Consumer { return &Consumer{Pending: n} }
	for _, c := range []struct {
		name      string
		own       float64
		others    []Peer
		consumer  *Consumer
		hintError float64
		meanHint  float64
		want      float64
	}{
		{"own speed unknown", 0, peers(50, 10), pending(100), 0, 0, inf},
		{"no consumer read", 10, peers(50, 10), nil, 0, 0, inf},
		{"alone", 10, nil, pending(100), 0, 0, inf},
		{"peers' speed unknown", 10, peers(0, 10), pending(100), 0, 0, inf},
		{"peers faster, but not by 1.5", 10, peers(14, 10), pending(100), 0, 0, inf},
		{"peers complete nothing yet", 10, peers(50, 0), pending(100), 0, 0, 0},
		// 100 prompts at 10 a second: 10 s at 10 tokens/s, over the
		// default error of 4.
		{"slow, hints' error not known", 10, peers(50, 10), pending(100), 0, 0, 25},
		{"slow, hints measured exact: the least error counts", 10, peers(50, 10), pending(100), 1, 0, 25},
		{"slow, nothing left", 10, peers(50, 10), pending(0), 5, 0, 0},
		{"two peers add their rates", 10, []Peer{{Speed: 50, Rate: 5}, {Speed: 20, Rate: 5}}, pending(100), 5, 0, 20},
		{"the largest error heard counts", 10, []Peer{{Speed: 50, Rate: 5, HintError: 8}, {Speed: 20, Rate: 5}}, pending(100), 5, 0, 12.5},
		// The others complete nothing yet, but stream 50 tokens a second
		// for each of 10 requests: 100 prompts of a mean hint of 50 take
		// them 10 s.
		{"others' pace from the hints left", 10, peers(50, 0), pending(100), 0, 50, 25},
		{"the shorter of the two measures", 10, peers(50, 20), pending(100), 0, 50, 12.5},
	} {
		s := Snapshot{Lanes: []Lane{{Peers: Peers{Pulling: c.others}, Consumer: c.consumer, HintError: c.hintError, MeanHint: c.meanHint}}}
		if got := HintLimit(s, 0, c.own); got != c.want {
			t.Errorf("%s: limit %v, want %v", c.name, got, c.want)
		}
	}
}

// The hints' error is the 99th percentile of the answers' lengths over
// their hints, once enough answers say.
func TestHintError(t *testing.T) {
	var v []float64
	for i := range schema.MinHintedAnswers - 1 {
		v = append(v, float64(i%10)/2)
	}
	slices.Sort(v)
	if got := HintError(v, len(v)); got != 0 {
		t.Errorf("%d answers: error %v, want 0 (too few)", len(v), got)
	}
	for range 100 {
		v = append(v, 1)
	}
	v = append(v, 40) // one answer in 200 far longer than its hint: above the 99th percentile
	slices.Sort(v)
	if got := HintError(v, len(v)); got != 4.5 {
		t.Errorf("error %v, want 4.5", got)
	}
}

// A worker with a limit holds back while the next prompt is above it,
// and only then.
func TestHintHold(t *testing.T) {
	for _, c := range []struct {
		limit   float64
		next    int
		bounced bool
		want    bool
	}{
		{math.Inf(1), 5000, true, false},
		{300, -1, false, false},
		{300, -1, true, true}, // the next not known, and one just handed back
		{300, 0, true, false}, // the next has no hint
		{300, 300, true, false},
		{300, 301, false, true},
		{0, 1, false, true},
	} {
		if got := HintHold(c.limit, c.next, c.bounced); got != c.want {
			t.Errorf("limit %v, next hint %d, bounced %v: hold %v, want %v", c.limit, c.next, c.bounced, got, c.want)
		}
	}
}

// A request's speed is the tokens streamed over the time by the requests
// decoding, in a moving mean.
func TestNextSpeed(t *testing.T) {
	for _, c := range []struct {
		name     string
		speed    float64
		tokens   int64
		decoding int
		dt       time.Duration
		want     float64
	}{
		{"first", 0, 1000, 10, 2 * time.Second, 50},
		{"moving mean", 50, 2000, 10, 2 * time.Second, 75},
		{"nothing decoding", 50, 0, 0, 2 * time.Second, 50},
		{"no time", 50, 100, 1, 0, 50},
		{"a counter reset", 50, -5, 1, time.Second, 50},
	} {
		if got := NextSpeed(c.speed, c.tokens, c.decoding, c.dt); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A prompt whose hint is above the limit is handed back, but never one
// without a hint, nor on its last deliveries.
func TestSlowFor(t *testing.T) {
	if SlowFor(5000, 1, 20, math.Inf(1)) {
		t.Error("handed back without a limit")
	}
	for _, c := range []struct {
		hint, attempt, maxDeliver int
		want                      bool
	}{{0, 1, 20, false}, {300, 1, 20, false}, {301, 1, 20, true}, {301, 9, 20, true}, {301, 10, 20, false}, {301, 9, 0, true}, {301, 10, 0, false}} {
		if got := SlowFor(c.hint, c.attempt, c.maxDeliver, 300); got != c.want {
			t.Errorf("hint %d, delivery %d of %d: %v, want %v", c.hint, c.attempt, c.maxDeliver, got, c.want)
		}
	}
}

// A request started before its worker knew itself slow is handed back
// while it has streamed less than a quarter of its hint, if it may be.
func TestSlowFlights(t *testing.T) {
	sent := t0
	flights := []Flight{
		{Key: FlightKey{Seq: 1}, Hint: 1000, Attempt: 1, Tokens: 100, State: FlightStreaming, Sent: sent},
		{Key: FlightKey{Seq: 2}, Hint: 1000, Attempt: 1, Tokens: 300, State: FlightStreaming, Sent: sent}, // too far in
		{Key: FlightKey{Seq: 3}, Hint: 200, Attempt: 1, Sent: sent},                                       // within the limit
		{Key: FlightKey{Seq: 4}, Hint: 1000, Attempt: 1, Last: true, Sent: sent},
		{Key: FlightKey{Seq: 5}, Hint: 1000, Attempt: 1}, // not sent
		{Key: FlightKey{Seq: 6}, Hint: 1000, Attempt: 1, State: FlightHandedBack, Sent: sent},
		{Key: FlightKey{Seq: 7}, Lane: 1, Hint: 1000, Attempt: 1, Sent: sent}, // another run
		{Key: FlightKey{Seq: 8}, Hint: 1000, Attempt: 1, Sent: sent},
	}
	got := SlowFlights(flights, 0, 20, 500)
	if want := []FlightKey{{Seq: 1}, {Seq: 8}}; !slices.Equal(got, want) {
		t.Errorf("handed back %v, want %v", got, want)
	}
	if got := SlowFlights(flights, 0, 20, math.Inf(1)); got != nil {
		t.Errorf("without a limit: %v", got)
	}
}

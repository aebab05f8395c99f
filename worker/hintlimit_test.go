package worker

import (
	"math"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// A worker limits the hints it starts only when it knows itself slow: the
// fastest other worker streams each request at least slowFactor times as
// fast. The limit is what it can generate in the time the others need to
// work off the prompts left, over the hints' error: 0 until the others'
// pace is known.
func TestHintPolicy(t *testing.T) {
	inf := math.Inf(1)
	peers := func(speed, rate float64) []tailPeer { return []tailPeer{{speed: speed, rate: rate, inFlight: 10}} }
	pending := func(n uint64) *consumerReading { return &consumerReading{pending: n} }
	for _, c := range []struct {
		name      string
		own       float64
		others    []tailPeer
		consumer  *consumerReading
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
		{"two peers add their rates", 10, []tailPeer{{speed: 50, rate: 5}, {speed: 20, rate: 5}}, pending(100), 5, 0, 20},
		{"the largest error heard counts", 10, []tailPeer{{speed: 50, rate: 5, hintError: 8}, {speed: 20, rate: 5}}, pending(100), 5, 0, 12.5},
		// The others complete nothing yet, but stream 50 tokens a second
		// for each of 10 requests: 100 prompts of a mean hint of 50 take
		// them 10 s.
		{"others' pace from the hints left", 10, peers(50, 0), pending(100), 0, 50, 25},
		{"the shorter of the two measures", 10, peers(50, 20), pending(100), 0, 50, 12.5},
	} {
		r := readings{lanes: []laneReading{{others: c.others, consumer: c.consumer, hintError: c.hintError, meanHint: c.meanHint}}}
		if got := hintPolicy(r, 0, c.own); got != c.want {
			t.Errorf("%s: limit %v, want %v", c.name, got, c.want)
		}
	}
}

// The hints' error is the 99th percentile of the answers' lengths over
// their hints, once enough answers say.
func TestHintError(t *testing.T) {
	var s sample[float64]
	for i := range schema.MinHintedAnswers - 1 {
		s.add(float64(i%10) / 2)
	}
	if got := hintError(s.sorted()); got != 0 {
		t.Errorf("%d answers: error %v, want 0 (too few)", schema.MinHintedAnswers-1, got)
	}
	for range 100 {
		s.add(1)
	}
	s.add(40) // one answer in 200 far longer than its hint: above the 99th percentile
	v, seen := s.sorted()
	if got := hintError(v, seen); got != 4.5 {
		t.Errorf("error %v, want 4.5", got)
	}
	l := &lane{}
	l.addHinted(0, 500) // no hint: not counted
	l.addHinted(100, 300)
	if v, seen := l.hintErr.sorted(); seen != 1 || v[0] != 3 {
		t.Errorf("hinted answers %v (%d counted), want [3] (1)", v, seen)
	}
}

// A worker with a limit holds back while the next prompt is above it,
// and only then.
func TestHintHoldPolicy(t *testing.T) {
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
		if got := hintHoldPolicy(c.limit, c.next, c.bounced); got != c.want {
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
		if got := nextSpeed(c.speed, c.tokens, c.decoding, c.dt); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A lane hands back a prompt whose hint is above its limit, but never one
// without a hint, nor on its last deliveries.
func TestSlowForHint(t *testing.T) {
	l := &lane{maxDeliver: 20}
	l.setHintLimit(math.Inf(1)) // as a new lane has
	if l.slowForHint(5000, 1) {
		t.Error("handed back before any limit was decided")
	}
	l.setHintLimit(300)
	for _, c := range []struct {
		hint, attempt int
		want          bool
	}{{0, 1, false}, {300, 1, false}, {301, 1, true}, {301, 9, true}, {301, 10, false}} {
		if got := l.slowForHint(c.hint, c.attempt); got != c.want {
			t.Errorf("hint %d, delivery %d: %v, want %v", c.hint, c.attempt, got, c.want)
		}
	}
	l.setHintLimit(math.Inf(1))
	if l.slowForHint(5000, 1) {
		t.Error("handed back without a limit")
	}
}

package worker

import (
	"math"
	"testing"
	"time"
)

// A worker limits the hints it starts only when it knows itself slow: the
// fastest other worker streams each request at least slowFactor times as
// fast. The limit is what it can generate in tailMargin times the time
// the others need to work off the prompts left.
func TestHintPolicy(t *testing.T) {
	inf := math.Inf(1)
	peers := func(speed, rate float64) []tailPeer { return []tailPeer{{speed: speed, rate: rate, inFlight: 10}} }
	pending := func(n uint64) *consumerReading { return &consumerReading{pending: n} }
	for _, c := range []struct {
		name     string
		own      float64
		others   []tailPeer
		consumer *consumerReading
		want     float64
	}{
		{"own speed unknown", 0, peers(50, 10), pending(100), inf},
		{"no consumer read", 10, peers(50, 10), nil, inf},
		{"alone", 10, nil, pending(100), inf},
		{"peers' speed unknown", 10, peers(0, 10), pending(100), inf},
		{"peers faster, but not by 1.5", 10, peers(14, 10), pending(100), inf},
		{"peers complete nothing yet", 10, peers(50, 0), pending(100), inf},
		// 100 prompts at 10 a second: 10 s; 1.5 x 10 s at 10 tokens/s.
		{"slow", 10, peers(50, 10), pending(100), 150},
		{"slow, nothing left", 10, peers(50, 10), pending(0), 0},
		{"two peers add their rates", 10, []tailPeer{{speed: 50, rate: 5}, {speed: 20, rate: 5}}, pending(100), 150},
	} {
		r := readings{lanes: []laneReading{{others: c.others, consumer: c.consumer}}}
		if got := hintPolicy(r, 0, c.own); got != c.want {
			t.Errorf("%s: limit %v, want %v", c.name, got, c.want)
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

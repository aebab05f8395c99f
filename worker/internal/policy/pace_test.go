package policy

import (
	"testing"
	"time"
)

// The first measure of a worker's speed comes from its requests
// streaming, before two snapshots can be compared.
func TestOwnSpeedFirstMeasure(t *testing.T) {
	streaming := func(tokens int64) []Flight {
		var fs []Flight
		for range 4 {
			fs = append(fs, Flight{State: FlightStreaming, Tokens: tokens, Sent: t0})
		}
		return fs
	}
	// Four requests, each 25 tokens in a second: 25 tokens a second.
	m := OwnSpeed(Snapshot{Now: t0.Add(time.Second), Pace: PaceReading{Tokens: 100}, Flights: streaming(25)}, Memory{})
	if m.Speed != 25 {
		t.Errorf("first speed %v, want 25", m.Speed)
	}
	m = OwnSpeed(Snapshot{Now: t0.Add(2 * time.Second), Pace: PaceReading{Tokens: 300}, Flights: streaming(75)}, m)
	if m.Speed != 37.5 { // the moving mean of 25 and 200/4
		t.Errorf("speed %v, want 37.5", m.Speed)
	}
}

func TestNextRate(t *testing.T) {
	if r := NextRate(0, 100, 110, time.Second); r != 10 {
		t.Errorf("first rate %v, want 10", r)
	}
	if r := NextRate(10, 110, 130, time.Second); r <= 10 || r >= 20 {
		t.Errorf("rate %v, want between 10 and 20", r)
	}
	if r := NextRate(10, 110, 100, time.Second); r != 10 {
		t.Errorf("a counter going back changed the rate to %v", r)
	}
	if r := NextRate(10, 110, 120, 0); r != 10 {
		t.Errorf("no time between heartbeats changed the rate to %v", r)
	}
}

func TestNextLatency(t *testing.T) {
	m := NextLatency(0, 10*time.Second)
	if m != 10*time.Second {
		t.Fatalf("mean %v after one 10 s request", m)
	}
	for range 200 {
		m = NextLatency(m, 20*time.Second)
	}
	if m < 19*time.Second || m > 20*time.Second {
		t.Errorf("mean %v after many 20 s requests", m)
	}
}

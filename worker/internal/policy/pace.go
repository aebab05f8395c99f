package policy

import (
	"time"
)

// "How fast am I?" has one answer: Memory.Speed, the completion tokens a
// second that each of this worker's requests streams, made by OwnSpeed
// at every decision. The hint limit and hedging compare it with the
// other workers' (each measured the same way, and carried by their
// heartbeats, see NextSpeed), and this worker's heartbeats carry it. The
// tail hold asks another question, how long one more prompt would take,
// and answers it with PaceReading.Latency; the tail hand-back waits on
// the backend's shortest time to first token (HandBackWait).

// speedWeight is each new measurement's weight in a speed's moving mean.
const speedWeight = 0.5

// NextSpeed returns the moving mean of the tokens a second each request
// streams, given the last one (0 while unknown) and tokens streamed over
// dt by decoding requests.
func NextSpeed(speed float64, tokens int64, decoding int, dt time.Duration) float64 {
	if dt <= 0 || decoding <= 0 || tokens < 0 {
		return speed
	}
	s := float64(tokens) / dt.Seconds() / float64(decoding)
	if speed == 0 {
		return s
	}
	return speed + speedWeight*(s-speed)
}

// OwnSpeed measures this worker's own speed per request since the last
// decision; the first time, before there are two snapshots to compare,
// from the requests streaming (see streaming).
func OwnSpeed(s Snapshot, m Memory) Memory {
	decoding, first := streaming(s.Flights, s.Now)
	if !m.SpeedAt.IsZero() {
		m.Speed = NextSpeed(m.Speed, s.Pace.Tokens-m.SpeedTokens, decoding, s.Now.Sub(m.SpeedAt))
	}
	if m.Speed == 0 {
		m.Speed = first
	}
	m.SpeedTokens, m.SpeedAt = s.Pace.Tokens, s.Now
	return m
}

// streaming returns how many of flights are streaming, and what these
// streamed a second each since they were sent (0 for none): a first
// measure of the worker's speed, before two snapshots can be compared.
func streaming(flights []Flight, now time.Time) (decoding int, speed float64) {
	var streamed int64
	var since time.Duration
	for _, f := range flights {
		if f.State != FlightStreaming {
			continue
		}
		decoding++
		if f.Tokens > 0 && !f.Sent.IsZero() && now.After(f.Sent) {
			streamed += f.Tokens
			since += now.Sub(f.Sent)
		}
	}
	if since > 0 {
		speed = float64(streamed) / since.Seconds()
	}
	return decoding, speed
}

// rateWeight is the weight of each heartbeat's interval in a peer's
// completion rate.
const rateWeight = 0.3

// NextRate is a peer's completion rate after a heartbeat that says it
// completed `completed` prompts, dt after the one before that said
// `was` (rate then 0 while unknown).
func NextRate(rate float64, was, completed int64, dt time.Duration) float64 {
	if dt <= 0 || completed < was {
		return rate
	}
	r := float64(completed-was) / dt.Seconds()
	if rate == 0 {
		return r
	}
	return rate + rateWeight*(r-rate)
}

// latencyWeight is the weight of each new request in the mean latency:
// about the last 30 requests count.
const latencyWeight = 1.0 / 32

// NextLatency is the moving mean of request times after one of d, mean
// being the one before (0 before any).
func NextLatency(mean, d time.Duration) time.Duration {
	if mean == 0 {
		return d
	}
	return mean + time.Duration(latencyWeight*float64(d-mean))
}

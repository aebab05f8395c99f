package livepage

import (
	"net/url"
	"sort"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// Worker is a worker as its latest heartbeat tells it.
type Worker struct {
	Name string `json:"name"`
	Host string `json:"host"`
	// Backend is the host (and port) of the worker's backend: never its
	// user info, path or query, where credentials could be.
	Backend string `json:"backend"`
	Window  int    `json:"window"`
	// InFlight is the requests at the backend (the heartbeat's
	// in_flight_tokens), what the window bounds; Held is the prompts the
	// worker holds (the heartbeat's in_flight), up to twice the window
	// while results are stored.
	InFlight int `json:"in_flight"`
	Held     int `json:"held"`
	// TokensPerSec is the rate of the worker's streamed tokens between
	// its last two heartbeats.
	TokensPerSec float64 `json:"tokens_per_sec"`
	Completed    int64   `json:"completed"`
	DeadLettered int64   `json:"dead_lettered"`
	Paused       bool    `json:"paused"`
	PausedReason string  `json:"paused_reason,omitempty"`
	// SilentSec is how long ago the latest heartbeat was sent.
	SilentSec float64 `json:"silent_sec"`
	// Stale is set when the worker has not been heard from for
	// StaleAfter: it may be gone.
	Stale bool `json:"stale"`
}

// Bounds on the worker table.
const (
	// StaleAfter is the silence after which a worker is shown as stale.
	StaleAfter = 15 * time.Second
	// forgetAfter is the silence after which a worker leaves the table.
	forgetAfter = 2 * time.Minute
	// maxWorkers bounds the table, whatever arrives on the heartbeat
	// subject.
	maxWorkers = 1000
)

type workerState struct {
	last schema.Heartbeat
	rate float64
}

type workerTable map[string]*workerState

func (t workerTable) observe(hb schema.Heartbeat) {
	w := t[hb.Worker]
	if w == nil {
		if len(t) >= maxWorkers {
			return
		}
		t[hb.Worker] = &workerState{last: hb}
		return
	}
	if !hb.Time.After(w.last.Time) {
		return // late or repeated
	}
	dt := hb.Time.Sub(w.last.Time).Seconds()
	if d := hb.TokensStreamed - w.last.TokensStreamed; d >= 0 {
		w.rate = float64(d) / dt
	} else {
		w.rate = 0 // the worker restarted under the same name
	}
	w.last = hb
}

// list returns the workers heard from within forgetAfter of now, by name,
// and forgets the others.
func (t workerTable) list(now time.Time) []Worker {
	out := make([]Worker, 0, len(t))
	for name, w := range t {
		silent := now.Sub(w.last.Time)
		if silent > forgetAfter {
			delete(t, name)
			continue
		}
		hb := w.last
		out = append(out, Worker{
			Name: hb.Worker, Host: hb.Host, Backend: backendHost(hb.Backend),
			Window: hb.Window, InFlight: len(hb.InFlightTokens), Held: hb.InFlight, TokensPerSec: w.rate,
			Completed: hb.Completed, DeadLettered: hb.DeadLettered,
			Paused: hb.Paused, PausedReason: hb.PausedReason,
			SilentSec: max(silent.Seconds(), 0), Stale: silent > StaleAfter,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// backendHost is the host:port of a backend URL, or "" when it has none.
func backendHost(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Host
}

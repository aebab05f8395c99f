package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// A JetStream store that fills mid-run refuses every result the workers
// store. Handing the prompts back would spend a delivery each time, and
// at MaxDeliver the prompt is lost to the run; generating more answers
// would only make more to keep. So the worker keeps the answers it has,
// tries to store them again with a back-off, and pulls nothing new until
// one is stored: then it resumes by itself. Space comes back when an old
// run is removed (aerie runs rm) or the server is given more.

// storeFullLogEvery is how often a worker waiting for room says so.
const storeFullLogEvery = 30 * time.Second

// storeGate holds the worker's pulls while the store is full. The zero
// value is a gate with room.
type storeGate struct {
	// onRoom, when set, is called once the store has room again.
	onRoom func()

	mu     sync.Mutex
	full   bool
	since  time.Time
	logged time.Time
	room   chan struct{} // closed when the store has room again; nil while it has
	total  time.Duration // time spent full, before since
}

// fullNow records a refusal for want of room, logging when the store
// has just filled and then every storeFullLogEvery.
func (g *storeGate) fullNow(err error, log *slog.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.full {
		g.full, g.since, g.room = true, now, make(chan struct{})
		g.logged = now
		log.Error("the JetStream store is full: pausing; the answers held are kept and stored once there is room", "err", err,
			"fix", "remove an old run with aerie runs rm, or raise the server's max_file_store")
		return
	}
	if now.Sub(g.logged) >= storeFullLogEvery {
		g.logged = now
		log.Warn("still waiting for room in the JetStream store", "for", now.Sub(g.since).Round(time.Second), "err", err)
	}
}

// roomAgain records a message stored, resuming the pulls if the store was
// full.
func (g *storeGate) roomAgain(log *slog.Logger) {
	g.mu.Lock()
	if !g.full {
		g.mu.Unlock()
		return
	}
	d := time.Since(g.since)
	g.full, g.total = false, g.total+d
	close(g.room)
	g.room = nil
	g.mu.Unlock()
	log.Info("the JetStream store has room again: resuming", "paused", d.Round(time.Millisecond))
	if g.onRoom != nil {
		g.onRoom()
	}
}

// wait returns at once while the store has room, and else when it has
// room again or ctx ends.
func (g *storeGate) wait(ctx context.Context) {
	g.mu.Lock()
	ch := g.room
	g.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// isFull reports whether the store is full, and the time spent full in
// all.
func (g *storeGate) isFull() (bool, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	total := g.total
	if g.full {
		total += time.Since(g.since)
	}
	return g.full, total
}

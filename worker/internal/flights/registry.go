package flights

import (
	"slices"
	"sync"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// Registry is a worker's requests in flight, by key. The zero value is
// empty and ready to use.
type Registry struct {
	mu sync.Mutex
	m  map[policy.FlightKey]*Flight
}

// Add puts f in the registry, in the place of any other flight of its
// key (another delivery of the prompt, running beside it), and returns
// what removes it, and only it, once its request is over.
func (r *Registry) Add(f *Flight) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[policy.FlightKey]*Flight{}
	}
	r.m[f.Key] = f
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.m[f.Key] == f {
			delete(r.m, f.Key)
		}
	}
}

// Snapshot is every flight as it is now, in key order.
func (r *Registry) Snapshot() []policy.Flight {
	r.mu.Lock()
	out := make([]policy.Flight, 0, len(r.m))
	for _, f := range r.m {
		out = append(out, f.view())
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b policy.Flight) int { return a.Key.Compare(b.Key) })
	return out
}

// Lane is the flights of lane as they are now, in key order.
func (r *Registry) Lane(lane int) []policy.Flight {
	r.mu.Lock()
	var out []policy.Flight
	for _, f := range r.m {
		if f.Lane == lane {
			out = append(out, f.view())
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b policy.Flight) int { return a.Key.Compare(b.Key) })
	return out
}

// Streamed is the tokens the flights of lane have streamed so far.
func (r *Registry) Streamed(lane int) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, f := range r.m {
		if f.Lane == lane {
			n += f.tokens.Load()
		}
	}
	return n
}

// Holds reports whether the flight of key is of lane.
func (r *Registry) Holds(key policy.FlightKey, lane int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.m[key]
	return f != nil && f.Lane == lane
}

// Cancel cancels the request of the flight of key with cause, moving it
// to state to, if it is sent, in one of the states from, and match (nil:
// any) says yes to it. It returns the tokens the request had streamed
// and whether it cancelled it. The request's own goroutine learns why
// from Flight.Ended.
func (r *Registry) Cancel(key policy.FlightKey, match func(*Flight) bool, to policy.FlightState, cause error, from ...policy.FlightState) (int64, bool) {
	r.mu.Lock()
	f := r.m[key]
	r.mu.Unlock()
	if f == nil || match != nil && !match(f) || !f.cancelAs(to, cause, from) {
		return 0, false
	}
	return f.tokens.Load(), true
}

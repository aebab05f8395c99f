package simulator

import (
	"context"
	"sync"
	"time"
)

// Where an outage came from, as /admin/faults reports it.
const (
	outageFromSchedule = "schedule"
	outageFromAdmin    = "admin"
)

// activeOutage is the outage in progress.
type activeOutage struct {
	id     uint64
	mode   OutageMode
	source string
	began  time.Time // wall time
	ends   time.Time // wall time; zero means until ended through /admin
}

// outageSwitch holds whether the server is down. At most one outage is
// on at a time: beginning another replaces it, mode and end included.
// Requests watch it to be cut when an outage begins; Serve watches it to
// close and reopen its listener.
type outageSwitch struct {
	speed  float64
	counts *faultCounts

	// replying is held for reading by an admin request from the moment
	// it begins an outage until its answer is flushed. Serve takes it
	// before closing connections for a refuse outage, so the admin
	// client still gets its answer.
	replying sync.RWMutex

	mu       sync.Mutex
	started  time.Time // when the engine started (wall); zero before
	current  *activeOutage
	lastMode OutageMode    // mode of the latest outage to begin
	begun    chan struct{} // closed when the next outage begins
	changed  chan struct{} // closed when the next outage begins or ends
	timer    *time.Timer   // ends the current outage
	nextID   uint64
}

func newOutageSwitch(speed float64, counts *faultCounts) *outageSwitch {
	return &outageSwitch{
		speed:   speed,
		counts:  counts,
		begun:   make(chan struct{}),
		changed: make(chan struct{}),
	}
}

// closedChan is a channel that is always ready to receive from.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// watch returns a channel that is closed once an outage is on: already
// closed if one is on now, otherwise closed when the next one begins.
func (o *outageSwitch) watch() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.current != nil {
		return closedChan
	}
	return o.begun
}

// changes returns a channel closed when an outage next begins or ends.
func (o *outageSwitch) changes() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

// mode is the current outage's mode, or "" when the server is up.
func (o *outageSwitch) mode() OutageMode {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.current == nil {
		return ""
	}
	return o.current.mode
}

// latestMode is the mode of the outage that began last, which is the
// one that cut a request whose watch channel closed, even if it has
// already ended.
func (o *outageSwitch) latestMode() OutageMode {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastMode
}

// begin starts an outage of mode lasting sim (simulated time; 0 means
// until end is called), replacing any outage in progress.
func (o *outageSwitch) begin(mode OutageMode, source string, sim time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stopTimer()
	o.nextID++
	now := time.Now()
	a := &activeOutage{id: o.nextID, mode: mode, source: source, began: now}
	if sim > 0 {
		wall := wallTime(sim, o.speed)
		a.ends = now.Add(wall)
		id := a.id
		o.timer = time.AfterFunc(wall, func() { o.endOutage(id) })
	}
	o.current = a
	o.lastMode = mode
	if mode == OutageRefuse {
		o.counts.add(faultOutageRefuse)
	} else {
		o.counts.add(faultOutage503)
	}
	close(o.begun)
	o.begun = make(chan struct{})
	o.signal()
}

// end ends the outage in progress and reports whether there was one.
func (o *outageSwitch) end() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.current == nil {
		return false
	}
	o.stopTimer()
	o.current = nil
	o.signal()
	return true
}

// endOutage ends outage id if it is still the one in progress.
func (o *outageSwitch) endOutage(id uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.current == nil || o.current.id != id {
		return
	}
	o.current = nil
	o.timer = nil
	o.signal()
}

// signal wakes everyone waiting on changes; mu must be held.
func (o *outageSwitch) signal() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// stopTimer cancels the pending end of the current outage; mu must be
// held.
func (o *outageSwitch) stopTimer() {
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
}

// start records when the engine started: the schedule and the clock
// /admin/faults shows count from it.
func (o *outageSwitch) start(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started = now
}

// runSchedule begins each outage at its start (simulated time since
// start was called) until ctx ends; each ends by itself after its
// duration.
func (o *outageSwitch) runSchedule(ctx context.Context, outages []Outage) {
	o.mu.Lock()
	started := o.started
	o.mu.Unlock()
	for _, out := range sortedOutages(outages) {
		wait := time.NewTimer(time.Until(started.Add(wallTime(out.Start, o.speed))))
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		o.begin(out.Mode, outageFromSchedule, out.Duration)
	}
}

// outageState is the outage part of GET /admin/faults. Times are
// simulated, as Go durations.
type outageState struct {
	Mode   OutageMode `json:"mode"`
	Source string     `json:"source"` // "schedule" or "admin"
	// Began is when it began, since the engine started.
	Began string `json:"began"`
	// Remaining is how long it has left; empty when it lasts until
	// DELETE /admin/outage.
	Remaining string `json:"remaining,omitempty"`
}

// state describes the outage in progress (nil when none) and the
// simulated time since the engine started (zero before).
func (o *outageSwitch) state(now time.Time) (*outageState, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	sim := func(wall time.Duration) time.Duration {
		return time.Duration(float64(wall) * o.speed).Round(time.Millisecond)
	}
	var clock time.Duration
	if !o.started.IsZero() {
		clock = sim(now.Sub(o.started))
	}
	if o.current == nil {
		return nil, clock
	}
	a := o.current
	st := &outageState{Mode: a.mode, Source: a.source}
	if !o.started.IsZero() {
		st.Began = sim(a.began.Sub(o.started)).String()
	}
	if !a.ends.IsZero() {
		st.Remaining = sim(max(a.ends.Sub(now), 0)).String()
	}
	return st, clock
}

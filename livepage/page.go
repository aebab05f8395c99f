// Package livepage is the aggregator's live page: one self-contained web
// page (progress, throughput and ETA over time, workers, failures by
// reason, the distribution of answer lengths) that updates itself, and
// the JSON behind it. It needs no internet: its HTML, script and styles
// are in the binary, its charts drawn by hand.
//
// A Page is an aggregator.Observer: the aggregator feeds it events,
// heartbeats and written answers; Handler serves it. Memory stays bounded
// however long the run (see history).
package livepage

import (
	"maps"
	"sync"
	"time"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// State is everything the page shows, as /api/state returns it.
type State struct {
	Run string `json:"run"`
	// Seq grows with every change, so a reader can tell a new state from
	// one it has seen.
	Seq uint64 `json:"seq"`
	// Now is when the state was taken.
	Now time.Time `json:"now"`
	// Last is the latest throughput event; nil before the first.
	Last    *schema.Throughput `json:"last"`
	History []Point            `json:"history"`
	Workers []Worker           `json:"workers"`
	Lengths Lengths            `json:"lengths"`
}

// Page collects a run's state for the live page. Its methods are safe for
// concurrent use and never block for long, so the aggregator's loops may
// call them. The zero value is not usable: use New.
type Page struct {
	run string
	now func() time.Time

	mu      sync.Mutex
	seq     uint64
	last    *schema.Throughput
	history *history
	workers workerTable
	lengths lengthHistogram
	changed chan struct{} // closed and replaced on every change
}

// New returns an empty page for run.
func New(run string) *Page {
	return &Page{
		run: run, now: time.Now,
		history: newHistory(DefaultHistory),
		workers: workerTable{},
		changed: make(chan struct{}),
	}
}

// Event records a throughput event.
func (p *Page) Event(s schema.Throughput) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.PausedWorkers = maps.Clone(s.PausedWorkers)
	s.FailedByReason = maps.Clone(s.FailedByReason)
	p.last = &s
	p.history.add(Point{
		T: s.Time.UnixMilli(), Completed: s.Completed,
		RequestsPerSec: s.RequestsPerSec, TokensPerSec: s.TokensPerSec,
		ETASec: s.ETASec, ETALowSec: s.ETALowSec, ETAHighSec: s.ETAHighSec,
	})
	p.touch()
}

// Heartbeat records a worker's heartbeat.
func (p *Page) Heartbeat(hb schema.Heartbeat) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.workers.observe(hb)
	p.touch()
}

// Answer counts a written line's answers in the length distribution: each
// request of the line (one with --turns last, every generated turn with
// --turns all). It does not announce a change: answers arrive by the
// hundred, and the next event or heartbeat carries them.
func (p *Page) Answer(a throughput.Answer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range a.Requests {
		p.lengths.add(int64(r.CompletionTokens), r.Truncated)
	}
}

// touch marks a change; p.mu is held.
func (p *Page) touch() {
	p.seq++
	close(p.changed)
	p.changed = make(chan struct{})
}

// State returns the page's state now, and a channel closed at the next
// change.
func (p *Page) State() (State, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	s := State{
		Run: p.run, Seq: p.seq, Now: now,
		History: p.history.snapshot(),
		Workers: p.workers.list(now),
		Lengths: p.lengths.snapshot(),
	}
	if p.last != nil {
		last := *p.last
		last.PausedWorkers = maps.Clone(last.PausedWorkers)
		last.FailedByReason = maps.Clone(last.FailedByReason)
		s.Last = &last
	}
	return s, p.changed
}

// Package window keeps a worker's window: the slots that bound the
// requests it has at its backend, shared between the prompts it pulls
// and the conversations that go on with their next turn, and the count
// of the messages it holds. It is permit bookkeeping only: how many a
// pull asks for is policy.PullSize's to say.
package window

import (
	"context"
	"slices"
	"sync"

	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// Window shares a worker's window, the number of requests that may be
// generating at once, between the prompts it pulls and the conversations
// (--turns all) that continue with their next turn. A conversation gives
// its slot back between turns, while it stores the turn it finished, and
// takes one again for the next turn before any new prompt is pulled: the
// conversations in progress finish before new ones start.
//
// It also counts the messages held (delivered and not yet settled). A
// prompt holds its slot from the pull until its last request is over,
// and its message until it is settled: while its result is stored and
// acknowledged the slot already generates the next prompt, and
// conversations between turns hold messages without slots. A pull never
// takes the held messages above heldCap, so that a stream slow to store
// cannot make a worker hoard prompts that other workers could answer.
// held counts the messages a pull has asked for and not yet received,
// so that the cap holds for them too; pending counts those alone, and
// what holding reports leaves them out: a pull waiting on an empty
// stream holds nothing yet.
//
// The size can change while the window is in use (see Resize), and the
// window stays exact meanwhile: free goes below zero when the size drops
// under the slots taken, and no pull or turn takes a slot until as many
// have been given back; requests that are running are never cut short
// for it.
//
// The zero value is not usable; see New.
type Window struct {
	mu   sync.Mutex
	size int
	// free is size minus the slots taken: negative after a resize down,
	// until that many slots have been released.
	free    int
	held    int
	pending int // of held, asked for by a pull and not yet received
	maxHeld int
	heldCap int
	// turns are the continuing turns waiting for a slot, first come first
	// served; a released slot goes to the first of them directly.
	turns []chan struct{}
	// changed is closed, and replaced, whenever a pull might now proceed.
	changed chan struct{}
}

// New returns a window of size slots, all free, that lets pulls
// hold up to heldCap messages (at least size).
func New(size, heldCap int) *Window {
	return &Window{size: size, free: size, heldCap: max(heldCap, size), changed: make(chan struct{})}
}

// Resize makes the window n slots (at least 1). Growing frees slots at
// once, to the waiting turns first; shrinking takes effect as slots are
// given back. The held cap keeps its ratio to the size.
func (s *Window) Resize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resizeLocked(n)
}

// resizeLocked is Resize with s.mu held.
func (s *Window) resizeLocked(n int) {
	n = max(n, 1)
	if n == s.size {
		return
	}
	s.heldCap = max(n, n*s.heldCap/s.size)
	s.free += n - s.size
	s.size = n
	for s.free > 0 && len(s.turns) > 0 {
		close(s.turns[0])
		s.turns = slices.Delete(s.turns, 0, 1)
		s.free--
	}
	s.signal()
}

// ShrinkBy makes the window k slots smaller than the slots taken now,
// if that is smaller than it is: as many slots as are given back next
// are retired instead of freed (at least 1 slot stays). The slots taken
// are size - free, free negative included: called again while they are
// still taken, it does not shrink the window a second time.
func (s *Window) ShrinkBy(k int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := max(1, s.size-s.free-k); n < s.size {
		s.resizeLocked(n)
	}
}

// State is the window's size, the slots taken (more than size after a
// resize down, until they are given back) and whether a pull is open.
func (s *Window) State() (size, taken int, pulling bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size, s.size - s.free, s.pending > 0
}

// Capacity is the window's size now.
func (s *Window) Capacity() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// signal wakes the pulls waiting; s.mu must be held.
func (s *Window) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// AcquirePull waits until a pull may ask for prompts (policy.PullSize:
// a slot is free, no continuing turn waits for one and fewer than
// heldCap messages are held), then takes as many slots and held
// messages as it may of want, pending until each message arrives (see
// Arrived) or is given back (see Unused). It returns how many it took:
// 0 once ctx has ended.
func (s *Window) AcquirePull(ctx context.Context, want int) int {
	for {
		if ctx.Err() != nil {
			return 0
		}
		s.mu.Lock()
		if n := policy.PullSize(want, s.size, s.size-s.free, len(s.turns), s.held, s.heldCap); n > 0 {
			s.free -= n
			s.held += n
			s.pending += n
			s.mu.Unlock()
			return n
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0
		case <-ch:
		}
	}
}

// Arrived counts one message a pull asked for as delivered: held from
// now until it is settled (see Drop).
func (s *Window) Arrived() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	s.maxHeld = max(s.maxHeld, s.held-s.pending)
}

// Unused gives back n slots and held messages that a pull took and no
// message came for.
func (s *Window) Unused(n int) {
	s.mu.Lock()
	s.pending -= n
	s.mu.Unlock()
	for range n {
		s.Release()
		s.Drop()
	}
}

// AcquireTurn takes a slot for the next turn of a conversation, ahead of
// any pull, waiting behind the turns that asked before it. It returns
// ctx's error, holding no slot, when ctx ends first.
func (s *Window) AcquireTurn(ctx context.Context) error {
	s.mu.Lock()
	if s.free > 0 {
		// A free slot means nobody waits: release hands slots to waiting
		// turns directly.
		s.free--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.turns = append(s.turns, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(s.turns, ch); i >= 0 {
		s.turns = slices.Delete(s.turns, i, i+1)
		s.signal() // a pull may have waited behind this turn
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Unlock()
	s.Release() // granted as ctx ended: pass it on
	return ctx.Err()
}

// Release gives back a slot: to the first waiting turn, or to the pool.
// After a resize down the slot is retired instead, until the slots taken
// fit the new size.
func (s *Window) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free >= 0 && len(s.turns) > 0 {
		close(s.turns[0])
		s.turns = slices.Delete(s.turns, 0, 1)
		return
	}
	s.free++
	s.signal()
}

// Drop counts a held message as settled.
func (s *Window) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held--
	s.signal()
}

// Holding returns the messages delivered and not yet settled now, and
// the most at once. Messages a pull has asked for and not received are
// not counted: they may never come.
func (s *Window) Holding() (now, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held - s.pending, s.maxHeld
}

// Lease is the lease of a message a pull asked for that has arrived
// (see Arrived): it holds its slot and itself.
func (s *Window) Lease() *Lease { return &Lease{win: s, slot: true} }

// Lease is what one delivered message holds of the window: always the
// message itself, and a slot while one of its requests may generate.
// It is used by the message's goroutine only.
type Lease struct {
	win  *Window
	slot bool
}

// Acquire takes a slot for the next turn unless the lease holds one.
func (l *Lease) Acquire(ctx context.Context) error {
	if l.slot {
		return nil
	}
	if err := l.win.AcquireTurn(ctx); err != nil {
		return err
	}
	l.slot = true
	return nil
}

// Release gives the slot back, if the lease holds one.
func (l *Lease) Release() {
	if l.slot {
		l.slot = false
		l.win.Release()
	}
}

// End gives everything back: the message is settled.
func (l *Lease) End() {
	l.Release()
	l.win.Drop()
}

package window

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pullResult runs AcquirePull in the background and returns a channel
// that receives what it took.
func pullResult(ctx context.Context, s *Window, want int) <-chan int {
	ch := make(chan int, 1)
	go func() { ch <- s.AcquirePull(ctx, want) }()
	return ch
}

func received[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting: %s", what)
		panic("unreachable")
	}
}

func pending[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: got %v, want it still waiting", what, v)
	case <-time.After(50 * time.Millisecond):
	}
}

// A continuing turn gets a released slot before a pull, turns are served
// in the order they asked, and a pull takes only slots nobody waits for.
func TestWindowTurnsBeforePulls(t *testing.T) {
	ctx := context.Background()
	s := New(2, 4)
	if n := s.AcquirePull(ctx, 5); n != 2 {
		t.Fatalf("first pull took %d slots, want the 2 free", n)
	}
	s.Arrived()
	s.Arrived()
	// Both messages are conversations: each gives its slot back while it
	// stores a turn, then asks for one again.
	s.Release()
	s.Release()
	if n := s.AcquirePull(ctx, 1); n != 1 {
		t.Fatalf("pull took %d, want 1", n)
	}
	s.Arrived()
	// One slot free: the first turn takes it at once; the second waits.
	if err := s.AcquireTurn(ctx); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- s.AcquireTurn(ctx) }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.turns) == 1 }, "the second turn to wait")
	pull := pullResult(ctx, s, 1)
	pending(t, pull, "pull while a turn waits")
	s.Release() // goes to the waiting turn, not to the pull
	if err := received(t, second, "second turn"); err != nil {
		t.Fatal(err)
	}
	pending(t, pull, "pull with no free slot")
	s.Release()
	if n := received(t, pull, "pull after a release"); n != 1 {
		t.Fatalf("pull took %d, want 1", n)
	}
	s.Arrived()
	if held, most := s.Holding(); held != 4 || most != 4 {
		t.Fatalf("held %d (most %d), want 4", held, most)
	}
}

// Messages a pull has asked for count against the window and the cap but
// are not held until they arrive: a pull waiting on an empty stream holds
// nothing, and what it gives back unused leaves nothing behind.
func TestWindowPendingNotHeld(t *testing.T) {
	ctx := context.Background()
	s := New(3, 3)
	if n := s.AcquirePull(ctx, 3); n != 3 {
		t.Fatalf("took %d, want 3", n)
	}
	if held, most := s.Holding(); held != 0 || most != 0 {
		t.Fatalf("with a pull waiting and nothing delivered: held %d (most %d), want 0", held, most)
	}
	s.Arrived()
	if held, most := s.Holding(); held != 1 || most != 1 {
		t.Fatalf("one of three delivered: held %d (most %d), want 1", held, most)
	}
	s.Unused(2)
	pull := pullResult(ctx, s, 3)
	if n := received(t, pull, "pull after two unused"); n != 2 {
		t.Fatalf("took %d with one held, want 2", n)
	}
	if held, _ := s.Holding(); held != 1 {
		t.Fatalf("held %d, want 1", held)
	}
	s.Unused(2)
	(&Lease{win: s, slot: true}).End()
	if held, most := s.Holding(); held != 0 || most != 1 {
		t.Fatalf("all settled: held %d (most %d), want 0 (1)", held, most)
	}
}

// Pulls never hold more messages than the cap, even with slots free.
func TestWindowHeldCap(t *testing.T) {
	ctx := context.Background()
	s := New(2, 3)
	if n := s.AcquirePull(ctx, 2); n != 2 {
		t.Fatalf("took %d", n)
	}
	s.Release()
	s.Release()
	if n := s.AcquirePull(ctx, 2); n != 1 {
		t.Fatalf("pull took %d with 2 held and a cap of 3, want 1", n)
	}
	pull := pullResult(ctx, s, 2)
	pending(t, pull, "pull at the cap")
	s.Drop() // a message settled
	if n := received(t, pull, "pull after a message settled"); n != 1 {
		t.Fatalf("took %d, want 1", n)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if n := s.AcquirePull(cancelled, 1); n != 0 {
		t.Fatalf("pull with an ended context took %d", n)
	}
}

// A turn that stops waiting leaves the accounting exact: a slot granted
// as its context ended is passed on, and pulls no longer wait behind it.
func TestWindowTurnCancelled(t *testing.T) {
	ctx := context.Background()
	s := New(1, 2)
	if n := s.AcquirePull(ctx, 1); n != 1 {
		t.Fatal(n)
	}
	tctx, cancel := context.WithCancel(ctx)
	turn := make(chan error, 1)
	go func() { turn <- s.AcquireTurn(tctx) }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.turns) == 1 }, "the turn to wait")
	cancel()
	if err := received(t, turn, "cancelled turn"); err == nil {
		t.Fatal("a cancelled turn got a slot")
	}
	s.Release()
	if n := s.AcquirePull(ctx, 1); n != 1 {
		t.Fatalf("pull after the turn gave up took %d, want 1", n)
	}
}

// However turns and pulls interleave, the slots in use never exceed the
// window, and every slot comes back.
func TestWindowNeverOversubscribed(t *testing.T) {
	const size, conversations, turns = 3, 40, 4
	s := New(size, 2*size)
	var using, most atomic.Int64
	use := func() {
		n := using.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond) // a request being generated
		using.Add(-1)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	started := 0
	for started < conversations {
		n := s.AcquirePull(ctx, min(size, conversations-started))
		for range n {
			s.Arrived()
			started++
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := &Lease{win: s, slot: true}
				defer l.End()
				for i := range turns {
					if err := l.Acquire(ctx); err != nil {
						t.Error(err)
						return
					}
					use()
					if i < turns-1 {
						l.Release()
					}
				}
			}()
		}
	}
	wg.Wait()
	if m := most.Load(); m > size {
		t.Errorf("%d slots in use at once, window is %d", m, size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != size || s.held != 0 || s.pending != 0 || len(s.turns) != 0 {
		t.Errorf("after all: free %d, held %d, pending %d, waiting %d; want %d, 0, 0, 0", s.free, s.held, s.pending, len(s.turns), size)
	}
	if s.maxHeld < 1 || s.maxHeld > 2*size {
		t.Errorf("held %d messages at once, cap is %d", s.maxHeld, 2*size)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Growing the window frees slots at once; shrinking it below the slots
// taken lets nothing more in, pull or turn, until in-flight is below the
// new size, and cuts nothing that runs.
func TestWindowResize(t *testing.T) {
	ctx := context.Background()
	s := New(2, 2)
	if n := s.AcquirePull(ctx, 5); n != 2 {
		t.Fatalf("took %d, want 2", n)
	}
	s.Arrived()
	s.Arrived()
	pull := pullResult(ctx, s, 5)
	pending(t, pull, "pull on a full window")
	s.Resize(4)
	if n := received(t, pull, "pull after growing"); n != 2 {
		t.Fatalf("took %d after growing to 4, want 2", n)
	}
	s.Arrived()
	s.Arrived()
	if c := s.Capacity(); c != 4 {
		t.Fatalf("capacity %d, want 4", c)
	}

	// Four taken; shrink to 2: two releases are retired, the third frees
	// a slot.
	s.Resize(2)
	pull = pullResult(ctx, s, 5)
	s.Release()
	s.Drop()
	s.Release()
	s.Drop()
	pending(t, pull, "pull with 2 in flight in a window of 2")
	turn := make(chan error, 1)
	go func() { turn <- s.AcquireTurn(ctx) }()
	pending(t, turn, "turn with 2 in flight in a window of 2")
	s.Release() // one in flight: the slot goes to the waiting turn
	if err := received(t, turn, "turn after a release"); err != nil {
		t.Fatal(err)
	}
	pending(t, pull, "pull with the freed slot given to a turn")
	s.Release()
	s.Drop()
	if n := received(t, pull, "pull after the last release"); n != 1 {
		t.Fatalf("took %d, want 1 (one slot taken by the turn)", n)
	}
	if c := s.Capacity(); c != 2 {
		t.Fatalf("capacity %d, want 2", c)
	}
	s.Resize(0)
	if c := s.Capacity(); c != 1 {
		t.Fatalf("resize(0) gave capacity %d, want at least 1", c)
	}
}

// A resize keeps the held cap's ratio to the window (--turns all holds
// up to twice the window).
func TestWindowResizeHeldCap(t *testing.T) {
	s := New(4, 8)
	s.Resize(10)
	s.mu.Lock()
	got := s.heldCap
	s.mu.Unlock()
	if got != 20 {
		t.Fatalf("held cap %d after resizing a window of 4 (cap 8) to 10, want 20", got)
	}
}

// shrinkBy(k) leaves k fewer slots than are taken, however often it is
// called while they stay taken: the tail tick calls it once a poll while
// a pull is open, and each call used to shrink the window again (6 slots
// taken, three calls of shrinkBy(2) gave 4, 2 and 1).
func TestWindowShrinkByOnce(t *testing.T) {
	ctx := context.Background()
	s := New(6, 12)
	if n := s.AcquirePull(ctx, 6); n != 6 {
		t.Fatalf("took %d, want 6", n)
	}
	for range 6 {
		s.Arrived()
	}
	for i := range 3 {
		s.ShrinkBy(2)
		if c := s.Capacity(); c != 4 {
			t.Fatalf("after call %d of shrinkBy(2) with 6 taken: capacity %d, want 4", i+1, c)
		}
	}
	// Slots given back are retired until 4 are taken; then a shrink
	// counts from the 4.
	s.Release()
	s.Drop()
	s.Release()
	s.Drop()
	s.ShrinkBy(2)
	if c := s.Capacity(); c != 2 {
		t.Fatalf("with 4 taken, shrinkBy(2) gave %d, want 2", c)
	}
	s.ShrinkBy(10)
	if c := s.Capacity(); c != 1 {
		t.Fatalf("shrinkBy past every slot gave %d, want 1", c)
	}
}

package worker_test

import (
	"container/heap"
	"math"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/simulator"
)

// fifoMakespan is the makespan, in seconds, of an ideal dispatcher of
// the answers of tokens (in queue order) over servers: every slot takes
// the next prompt the moment it is free, with no time lost outside the
// servers, knowing each server's sequences and time a token and the
// answers' mean length, but not each answer's. With margin above 0, a
// slower server takes no prompt once the fastest would answer the ones
// left sooner than it would answer one (both times scaled by margin, as
// the worker's tail hold does; 0 holds never back).
//
// It is what a schedule blind to answer lengths could do at best with
// the same answers: the lower bound of the benchmark assumes every slot
// busy to the end, which no such schedule reaches, because the run ends
// with the longest of the answers running when the queue empties.
func fifoMakespan(tokens []int, servers []simulator.Config, margin float64) float64 {
	if len(tokens) == 0 {
		return 0
	}
	var mean float64
	for _, t := range tokens {
		mean += float64(t)
	}
	mean /= float64(len(tokens))
	fastest := servers[0]
	for _, s := range servers {
		if s.StepBase < fastest.StepBase {
			fastest = s
		}
	}
	fastRate := float64(fastest.MaxNumSeqs) / (mean * fastest.StepBase.Seconds())

	slots := &slotHeap{}
	for i, s := range servers {
		for range s.MaxNumSeqs {
			heap.Push(slots, slot{server: i})
		}
	}
	var end float64
	next := 0
	for next < len(tokens) && slots.Len() > 0 {
		s := heap.Pop(slots).(slot)
		step := servers[s.server].StepBase.Seconds()
		if margin > 0 && step > fastest.StepBase.Seconds() {
			left := float64(len(tokens) - next)
			if margin*mean*step > left/fastRate+margin*mean*fastest.StepBase.Seconds() {
				continue // held back to the end: the slot takes nothing more
			}
		}
		done := s.free + float64(tokens[next])*step
		next++
		end = max(end, done)
		heap.Push(slots, slot{free: done, server: s.server})
	}
	return end
}

// bestFIFOMakespan is the shortest fifoMakespan over the tail-hold
// margins a dispatcher could choose, never holding back included.
func bestFIFOMakespan(tokens []int, servers []simulator.Config) float64 {
	best := fifoMakespan(tokens, servers, 0)
	for _, m := range []float64{1, 1.25, 1.5, 2, 2.5, 3} {
		best = min(best, fifoMakespan(tokens, servers, m))
	}
	return best
}

// slot is one sequence of a server, free from `free` seconds on.
type slot struct {
	free   float64
	server int
}

// slotHeap orders slots by when they are free, then by server so that
// the fastest server (listed first) takes a prompt first on a tie.
type slotHeap []slot

func (h slotHeap) Len() int { return len(h) }
func (h slotHeap) Less(i, j int) bool {
	if h[i].free != h[j].free {
		return h[i].free < h[j].free
	}
	return h[i].server < h[j].server
}
func (h slotHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)   { *h = append(*h, x.(slot)) }
func (h *slotHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}

// near reports whether two makespans agree to a microsecond.
func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestFIFOMakespan(t *testing.T) {
	fast := simulator.Config{MaxNumSeqs: 2, StepBase: 10 * time.Millisecond}
	slow := simulator.Config{MaxNumSeqs: 1, StepBase: 30 * time.Millisecond}
	// Two slots, answers of 100 tokens (1 s each): four answers take 2 s.
	if got := fifoMakespan([]int{100, 100, 100, 100}, []simulator.Config{fast}, 0); !near(got, 2) {
		t.Errorf("one server: makespan %g, want 2", got)
	}
	// The long answer last decides the end: 1 s, then 3 s more.
	if got := fifoMakespan([]int{100, 100, 300}, []simulator.Config{fast}, 0); !near(got, 4) {
		t.Errorf("long answer last: makespan %g, want 4", got)
	}
	// Without a hold the slow server takes the third answer at once and
	// ends at 3 s; holding back, the fast one answers it at 1 to 2 s.
	tokens := []int{100, 100, 100}
	servers := []simulator.Config{fast, slow}
	if got := fifoMakespan(tokens, servers, 0); !near(got, 3) {
		t.Errorf("no hold: makespan %g, want 3", got)
	}
	if got := fifoMakespan(tokens, servers, 1.5); !near(got, 2) {
		t.Errorf("hold: makespan %g, want 2", got)
	}
	if got := bestFIFOMakespan(tokens, servers); !near(got, 2) {
		t.Errorf("best: makespan %g, want 2", got)
	}
	if got := fifoMakespan(nil, servers, 1); !near(got, 0) {
		t.Errorf("no answers: makespan %g, want 0", got)
	}
}

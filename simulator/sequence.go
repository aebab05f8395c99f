package simulator

import (
	"container/list"
	"errors"
	"sync/atomic"
	"time"
)

// errEngineStopped ends requests still in flight when Run returns.
var errEngineStopped = errors.New("simulator: engine stopped")

// phase is where a sequence is in the engine.
type phase int

const (
	phaseNew        phase = iota // not yet submitted
	phaseWaiting                 // queued for a slot and KV room
	phasePrefilling              // admitted, prompt being read
	phaseDecoding                // generating one token per step
	phaseDone                    // finished, canceled or failed
)

// sequence is one request inside the engine. The engine goroutine and the
// request's handler share it: the fields above the line are fixed at
// creation, the engine fields are guarded by the engine's mutex, and the
// handler learns of progress through tokens, notify and done.
type sequence struct {
	prompt int    // prompt tokens
	answer answer // what will be generated
	// prefix identifies the prompt in the prefix cache (its hash); 0
	// keeps the sequence out of it.
	prefix uint64

	// Engine state, under engine.mu.
	phase       phase
	elem        *list.Element // in the waiting or prefilling list
	runElem     *list.Element // in the running list, in admission order
	prefillLeft int           // tokens not yet prefilled (of prompt + kept)
	base        int64         // engine step count at which this had 0 tokens
	heapIndex   int           // position in the decoding heap
	bucket      int           // decodeBuckets slot while decoding (see kv.go)
	// kept is how many tokens the sequence had generated when it was
	// last preempted: they stay with the client, and readmission
	// prefills them again after the prompt. preemptions counts how
	// often it was preempted.
	kept, preemptions int

	// priority is the request's (lower first, with
	// SchedulingPriority); arrival numbers the sequences in the order
	// they were submitted, and submitted is the engine's simulated clock
	// then, from which its time to first token is measured.
	priority  int
	arrival   uint64
	submitted time.Duration

	// owner is the request of a Virtual engine this sequence stands for;
	// nil in a server.
	owner *VirtualRequest

	// tokens is how many tokens have been generated, as last published
	// by the engine. It only grows; it reaches answer.tokens when done
	// closes without err.
	tokens atomic.Int64
	// notify gets a value (never blocking, capacity 1) when tokens grows.
	notify chan struct{}
	// done is closed when the sequence finishes or fails; err is set
	// before that and tells which.
	done chan struct{}
	err  error
}

func newSequence(prompt int, a answer) *sequence {
	return &sequence{
		prompt:    prompt,
		answer:    a,
		heapIndex: -1,
		notify:    make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
}

// finishStep is the engine step at which the last token appears.
func (s *sequence) finishStep() int64 {
	return s.base + int64(s.answer.tokens)
}

// publish makes n generated tokens visible to the handler and wakes it.
func (s *sequence) publish(n int64) {
	if s.tokens.Load() == n {
		return
	}
	s.tokens.Store(n)
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// decodeHeap orders decoding sequences by the step at which they finish,
// so the engine finds finished ones without scanning the batch.
type decodeHeap []*sequence

func (h decodeHeap) Len() int           { return len(h) }
func (h decodeHeap) Less(i, j int) bool { return h[i].finishStep() < h[j].finishStep() }
func (h decodeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}

func (h *decodeHeap) Push(x any) {
	s := x.(*sequence)
	s.heapIndex = len(*h)
	*h = append(*h, s)
}

func (h *decodeHeap) Pop() any {
	old := *h
	n := len(old)
	s := old[n-1]
	old[n-1] = nil
	s.heapIndex = -1
	*h = old[:n-1]
	return s
}

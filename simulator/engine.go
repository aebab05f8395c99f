package simulator

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"
)

const (
	// tickInterval is how often (wall time) the engine advances. Each
	// tick runs every decode step that fits in the simulated time that
	// passed, so the cost per tick depends on the batch, not on Speed.
	tickInterval = 5 * time.Millisecond
	// publishEvery is how many ticks pass between progress updates to
	// running requests (20ms of wall time), which bounds stream chunks
	// to 50 per second per request however fast simulated time runs.
	// First tokens and completions are published at once.
	publishEvery = 4
	// maxTickGap caps the wall time one tick may credit, so a stalled
	// host (a paused process, a slow test machine) does not make the
	// engine run a burst of hours of simulated time at once.
	maxTickGap = 250 * time.Millisecond
	// maxStepsPerTick bounds the work of one tick; beyond it simulated
	// time slips behind Speed rather than starving the host.
	maxStepsPerTick = 100_000
	// prefillChunkTokens is the token budget of one engine step (vLLM's
	// max_num_batched_tokens with chunked prefill): decode tokens first,
	// the rest goes to prompts in FIFO order.
	prefillChunkTokens = 8192
	// minPrefillChunk keeps prefill moving when a huge batch would leave
	// no budget for it.
	minPrefillChunk = 1024
	// maxCredit bounds the simulated time the engine may owe itself.
	maxCredit = time.Duration(1 << 50)
)

// Finish reasons, as vLLM reports them.
const (
	finishStop   = "stop"
	finishLength = "length"
)

// engine is the continuous-batching scheduler. Everything in it is
// guarded by mu; the loop in run takes the lock once per tick.
type engine struct {
	cfg  Config
	kick chan struct{} // wakes an idle loop when work arrives
	// running is closed once the loop has started: /health answers 200
	// from then on (Server.Serve waits for it before it serves).
	running chan struct{}

	mu         sync.Mutex
	started    bool
	stopped    bool
	waiting    list.List // of *sequence, FIFO, the preempted first; by priority with SchedulingPriority
	prefilling list.List // of *sequence, in admission order
	decoding   decodeHeap
	order      list.List     // running (prefilling + decoding), in admission order
	steps      int64         // decode steps run so far
	credit     time.Duration // simulated time not yet spent on steps
	clock      time.Duration // simulated time spent on steps
	ticks      int64
	fresh      []*sequence // got their first token this tick

	// KV cache, in blocks of kvBlockSize tokens (see kv.go).
	kvCap, kvBlocks int              // capacity, held by running sequences
	decodeBuckets   [kvBlockSize]int // decoding sequences by block offset
	preempting      bool             // the step being scheduled preempted
	preemptionTotal int64            // preemptions so far

	// arrivals numbers the sequences submitted; ttft observes each time
	// to first token, in simulated seconds.
	arrivals uint64
	ttft     histogram

	// prefixes is the prefix cache (prefix.go).
	prefixes *prefixCache

	generated, promptTotal int64
	finished               map[string]int64 // by finish reason
	aborted                int64

	// onFinish, if set, is called under mu for each sequence that
	// completes; tests use it to replay a closed loop of clients in
	// simulated time.
	onFinish func(*sequence)
}

func newEngine(cfg Config) *engine {
	return &engine{
		cfg:      cfg,
		kick:     make(chan struct{}, 1),
		running:  make(chan struct{}),
		kvCap:    blocksFor(cfg.KVCacheTokens),
		prefixes: newPrefixCache(cfg.PrefixCache),
		ttft:     newHistogram(ttftBuckets),
		finished: map[string]int64{finishStop: 0, finishLength: 0},
	}
}

// submit queues s behind the running sequences.
func (e *engine) submit(s *sequence) error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return errEngineStopped
	}
	e.enqueue(s)
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
	return nil
}

// enqueue puts a new s at the back of the queue, or with
// SchedulingPriority behind every sequence of its priority or a lower
// value; mu must be held.
func (e *engine) enqueue(s *sequence) {
	e.arrivals++
	s.arrival, s.submitted = e.arrivals, e.clock
	s.phase = phaseWaiting
	if e.cfg.SchedulingPolicy == SchedulingPriority {
		e.queueByPriority(s)
		return
	}
	s.elem = e.waiting.PushBack(s)
}

// queueByPriority puts s in the waiting queue by (priority, arrival), as
// vLLM's priority queue orders it; mu must be held.
func (e *engine) queueByPriority(s *sequence) {
	for el := e.waiting.Back(); el != nil; el = el.Prev() {
		if o := el.Value.(*sequence); !before(s, o) {
			s.elem = e.waiting.InsertAfter(s, el)
			return
		}
	}
	s.elem = e.waiting.PushFront(s)
}

// before reports whether a goes before b under SchedulingPriority.
func before(a, b *sequence) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	return a.arrival < b.arrival
}

// cancel removes s wherever it is, freeing its slot at once. It is a
// no-op for a finished sequence.
func (e *engine) cancel(s *sequence) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch s.phase {
	case phaseWaiting:
		e.waiting.Remove(s.elem)
	case phasePrefilling:
		e.stopPrefilling(s)
		e.order.Remove(s.runElem)
	case phaseDecoding:
		e.stopDecoding(s)
		e.order.Remove(s.runElem)
	default: // never submitted, or already finished
		return
	}
	s.elem, s.runElem = nil, nil
	s.phase = phaseDone
	e.aborted++
}

// run is the engine loop; see Server.Run.
func (e *engine) run(ctx context.Context) error {
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return errors.New("simulator: engine already started; Run may be called once")
	}
	e.started = true
	e.mu.Unlock()
	close(e.running)
	defer e.stop()

	ticker := time.NewTicker(tickInterval)
	defer ticker.Stop()
	last := time.Now()
	for {
		if e.idle() {
			// Sleep until work arrives; simulated time stands still
			// meanwhile, as nothing would happen in it.
			select {
			case <-ctx.Done():
				return nil
			case <-e.kick:
			}
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case now := <-ticker.C:
			// A tick older than the wake-up credits nothing.
			if d := now.Sub(last); d > 0 {
				e.tick(min(d, maxTickGap))
				last = now
			}
		}
	}
}

func (e *engine) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.waiting.Len() == 0 && e.order.Len() == 0
}

// tick advances simulated time by wall*Speed and publishes progress.
func (e *engine) tick(wall time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sim := float64(wall) * e.cfg.Speed
	e.credit = min(e.credit+time.Duration(min(sim, float64(maxCredit))), maxCredit)
	e.advance()
	e.ticks++
	for _, s := range e.fresh {
		if s.phase == phaseDecoding {
			s.publish(e.steps - s.base)
		}
	}
	clear(e.fresh)
	e.fresh = e.fresh[:0]
	if e.ticks%publishEvery == 0 {
		for _, s := range e.decoding {
			s.publish(e.steps - s.base)
		}
	}
}

// advance runs engine steps while the credit pays for them. Each step
// costs StepBase + StepPerSeq*batch plus PrefillPerToken for the prompt
// tokens it reads, and gives every decoding sequence one token.
func (e *engine) advance() {
	perSeq, perToken := max(e.cfg.StepPerSeq, 0), max(e.cfg.PrefillPerToken, 0)
	for range maxStepsPerTick {
		batch, chunk := e.schedule()
		if batch == 0 && chunk == 0 {
			e.credit = 0
			e.preempting = false
			return
		}
		cost := e.cfg.StepBase + perSeq*time.Duration(batch) + perToken*time.Duration(chunk)
		if cost > e.credit {
			return
		}
		e.credit -= cost
		e.clock += cost
		e.kvBlocks += e.decodeBlocksNeeded()
		e.steps++
		e.generated += int64(batch)
		e.prefill(chunk)
		e.finishDue()
		e.preempting = false
	}
	// The host could not keep up with Speed: let simulated time slip.
	e.credit = 0
}

// prefill reads n prompt tokens, oldest admission first, taking the
// blocks they fill. A prompt read to the end yields its next token in
// this step, as in vLLM.
func (e *engine) prefill(n int) {
	for n > 0 && e.prefilling.Len() > 0 {
		s := e.prefilling.Front().Value.(*sequence)
		used := min(n, s.prefillLeft)
		done := s.prompt + s.kept - s.prefillLeft
		e.kvBlocks += blocksFor(done+used) - blocksFor(done)
		s.prefillLeft -= used
		n -= used
		if s.prefillLeft > 0 {
			return
		}
		e.prefilling.Remove(s.elem)
		s.elem = nil
		if s.kept == 0 {
			e.promptTotal += int64(s.prompt)
		}
		e.startDecoding(s)
		e.generated++
		e.fresh = append(e.fresh, s)
		if s.kept == 0 {
			e.ttft.observe((e.clock - s.submitted).Seconds())
		}
	}
}

// finishDue completes the sequences whose last token came in this step.
func (e *engine) finishDue() {
	for len(e.decoding) > 0 && e.decoding[0].finishStep() <= e.steps {
		s := e.decoding[0]
		e.stopDecoding(s)
		e.order.Remove(s.runElem)
		s.runElem = nil
		s.phase = phaseDone
		e.finished[s.answer.finishReason]++
		s.publish(int64(s.answer.tokens))
		close(s.done)
		if e.onFinish != nil {
			e.onFinish(s)
		}
	}
}

// stop fails every sequence still in the engine and refuses new ones.
func (e *engine) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	fail := func(s *sequence) {
		s.phase = phaseDone
		s.elem, s.runElem = nil, nil
		s.err = errEngineStopped
		close(s.done)
	}
	for el := e.waiting.Front(); el != nil; el = el.Next() {
		fail(el.Value.(*sequence))
	}
	for el := e.prefilling.Front(); el != nil; el = el.Next() {
		fail(el.Value.(*sequence))
	}
	for _, s := range e.decoding {
		fail(s)
	}
	e.waiting.Init()
	e.prefilling.Init()
	e.order.Init()
	e.decoding = nil
	e.kvBlocks, e.decodeBuckets = 0, [kvBlockSize]int{}
}

// healthy reports whether the loop is running.
// queued is how many sequences wait for a slot.
func (e *engine) queued() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.waiting.Len()
}

func (e *engine) healthy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started && !e.stopped
}

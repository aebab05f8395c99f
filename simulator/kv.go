package simulator

import "container/heap"

// kvBlockSize is the tokens of one KV cache block, vLLM's default
// --block-size on GPUs. A sequence holds whole blocks, so a batch of
// short sequences fills the cache sooner than its token count says.
const kvBlockSize = 16

// blocksFor is the number of blocks that hold n tokens.
func blocksFor(n int) int { return (n + kvBlockSize - 1) / kvBlockSize }

// The engine's KV cache follows vLLM's V1 scheduler (recompute
// preemption, no swapping; whole prompts in the prefix cache, see
// Config.PrefixCache):
//
//   - A running sequence holds the blocks of the tokens computed for it:
//     the prompt read so far while prefilling, then prompt plus answer
//     less the token just sampled (its KV is computed by the next step).
//   - Each step first gives the running sequences their tokens (one each
//     for decoding, the chunk budget in admission order for prefilling)
//     and the blocks those need. If the cache lacks them, the most
//     recently admitted running sequence is preempted, again until the
//     rest fit: its blocks are freed and it goes back to the front of
//     the queue, keeping the tokens it already sent to its client.
//   - Only in a step that preempted nothing, waiting requests are then
//     admitted, oldest first, while a slot is free (MaxNumSeqs), the
//     step's token budget has room and the cache has the blocks of the
//     chunk the request would read in it. A request that does not fit
//     holds the ones behind it back (first come, first served).
//   - A readmitted sequence prefills its prompt plus the tokens it had
//     generated, then goes on from where its stream paused: no token is
//     sent twice. Its recomputed tokens are not counted again as prompt
//     or generation tokens.

// decodeBlocksNeeded is how many new blocks the next step needs for the
// decoding sequences: one for each whose computed tokens exactly fill
// its blocks. A decoding sequence's computed tokens are steps + its
// offset prompt - base - 1, so those are the sequences whose offset is
// -steps modulo the block size; decodeBuckets counts them by offset.
func (e *engine) decodeBlocksNeeded() int {
	return e.decodeBuckets[int((kvBlockSize-e.steps%kvBlockSize)%kvBlockSize)]
}

// computed is the number of tokens whose KV a decoding sequence holds.
func (e *engine) computed(s *sequence) int {
	return s.prompt + int(e.steps-s.base) - 1
}

// blocksHeld is the number of KV blocks s holds now.
func (e *engine) blocksHeld(s *sequence) int {
	switch s.phase {
	case phasePrefilling:
		return blocksFor(s.prompt + s.kept - s.prefillLeft)
	case phaseDecoding:
		return blocksFor(e.computed(s))
	}
	return 0
}

// startDecoding moves s, whose prefill just ended, into the decoding
// heap with its first new token generated in the step just run.
func (e *engine) startDecoding(s *sequence) {
	s.phase = phaseDecoding
	s.base = e.steps - int64(s.kept+1)
	off := (int64(s.prompt) - s.base - 1) % kvBlockSize
	s.bucket = int((off + kvBlockSize) % kvBlockSize)
	e.decodeBuckets[s.bucket]++
	heap.Push(&e.decoding, s)
}

// stopDecoding takes s out of the decoding heap (finished, canceled or
// preempted), freeing its blocks.
func (e *engine) stopDecoding(s *sequence) {
	e.kvBlocks -= e.blocksHeld(s)
	e.decodeBuckets[s.bucket]--
	if s.heapIndex >= 0 {
		heap.Remove(&e.decoding, s.heapIndex)
	}
}

// stopPrefilling takes s out of the prefilling list, freeing its blocks.
func (e *engine) stopPrefilling(s *sequence) {
	e.kvBlocks -= e.blocksHeld(s)
	e.prefilling.Remove(s.elem)
	s.elem = nil
}

// planPrefill returns the prompt tokens the prefilling sequences read
// in a step with this budget, oldest first, and the new blocks they need.
func (e *engine) planPrefill(budget int) (tokens, blocks int) {
	for el := e.prefilling.Front(); el != nil && tokens < budget; el = el.Next() {
		s := el.Value.(*sequence)
		done := s.prompt + s.kept - s.prefillLeft
		used := min(budget-tokens, s.prefillLeft)
		tokens += used
		blocks += blocksFor(done+used) - blocksFor(done)
	}
	return tokens, blocks
}

// schedule decides the next step as vLLM's scheduler does (see above):
// it preempts while the running sequences' blocks do not fit, then
// admits what fits. It returns the decoding batch and the prompt tokens
// the step reads. It changes the engine at once, as the step starts
// now; called again before the step is paid for, it finds nothing left
// to preempt and may admit newcomers into the same step, unless the
// step preempted.
func (e *engine) schedule() (batch, chunk int) {
	// Bounded: each round preempts one running sequence.
	for e.order.Len() > 0 {
		_, blocks := e.planPrefill(e.prefillBudget())
		if e.kvBlocks+e.decodeBlocksNeeded()+blocks <= e.kvCap {
			break
		}
		e.preempt(e.victim())
	}
	budget := e.prefillBudget()
	chunk, blocks := e.planPrefill(budget)
	need := e.kvBlocks + e.decodeBlocksNeeded() + blocks
	for !e.preempting && chunk < budget && e.order.Len() < e.cfg.MaxNumSeqs && e.waiting.Len() > 0 {
		s := e.waiting.Front().Value.(*sequence)
		hit := e.prefixes.lookup(s)
		used := min(budget-chunk, s.prompt+s.kept-hit)
		if need+blocksFor(hit+used) > e.kvCap {
			break
		}
		e.waiting.Remove(s.elem)
		e.prefixes.admit(s, hit)
		s.phase = phasePrefilling
		s.prefillLeft = s.prompt + s.kept - hit
		// The cached blocks count as the sequence's own (see
		// Config.PrefixCache); prefill charges the rest as it reads.
		e.kvBlocks += blocksFor(hit)
		s.elem = e.prefilling.PushBack(s)
		s.runElem = e.order.PushBack(s)
		chunk += used
		need += blocksFor(hit + used)
	}
	return len(e.decoding), chunk
}

// prefillBudget is the prompt tokens a step may read: what the decoding
// batch leaves of the step's token budget, but never less than a
// minimum chunk.
func (e *engine) prefillBudget() int {
	return max(prefillChunkTokens-len(e.decoding), minPrefillChunk)
}

// victim is the running sequence to preempt: the last admitted, or with
// SchedulingPriority the one of the highest priority value, the latest
// to arrive among equals (vLLM's max over (priority, arrival)); mu must
// be held and a sequence must be running.
func (e *engine) victim() *sequence {
	v := e.order.Back().Value.(*sequence)
	if e.cfg.SchedulingPolicy != SchedulingPriority {
		return v
	}
	for el := e.order.Front(); el != nil; el = el.Next() {
		if s := el.Value.(*sequence); before(v, s) {
			v = s
		}
	}
	return v
}

// preempt frees the blocks of running sequence s and puts it back at
// the front of the queue, or with SchedulingPriority in its place by
// priority and arrival (vLLM's recompute preemption). Its stream pauses
// with every token generated so far published.
func (e *engine) preempt(s *sequence) {
	switch s.phase {
	case phasePrefilling:
		e.stopPrefilling(s)
	case phaseDecoding:
		s.kept = int(e.steps - s.base)
		s.publish(int64(s.kept))
		e.stopDecoding(s)
	default:
		return
	}
	e.order.Remove(s.runElem)
	s.runElem = nil
	s.phase = phaseWaiting
	if e.cfg.SchedulingPolicy == SchedulingPriority {
		e.queueByPriority(s)
	} else {
		s.elem = e.waiting.PushFront(s)
	}
	s.preemptions++
	e.preemptionTotal++
	e.preempting = true
}

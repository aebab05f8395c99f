package simulator

import (
	"fmt"
	"time"
)

// Virtual is the simulator's engine run in simulated time alone: no wall
// clock, no HTTP, no goroutine. A study of a five-hour run takes seconds
// with it, and sees exactly the batching, prefill and answer lengths a
// client of the server would see at any Speed (Speed itself is ignored).
// It is not safe for concurrent use; OnFinish may call Submit.
type Virtual struct {
	e   *engine
	now time.Duration
	// OnFinish, if set, is called for each request as its last token is
	// generated, with Now at that step's end. A closed loop of clients
	// submits its next request from here.
	OnFinish func(*VirtualRequest)
}

// VirtualRequest is one request in a Virtual engine.
type VirtualRequest struct {
	v *Virtual
	s *sequence
	// ID is the caller's name for the request, untouched.
	ID int
	// Finished is the simulated time of the last token; zero until then.
	Finished time.Duration
}

// NewVirtual returns a virtual engine for cfg (defaults applied, then
// validated). Faults are not injected.
func NewVirtual(cfg Config) (*Virtual, error) {
	cfg = cfg.WithDefaults()
	cfg.Faults = Faults{}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Virtual{e: newEngine(cfg)}
	v.e.onFinish = func(s *sequence) {
		r := s.owner
		r.Finished = v.e.clock
		if v.OnFinish != nil {
			v.OnFinish(r)
		}
	}
	return v, nil
}

// Submit queues a request for messages with a max_tokens limit (0 or
// less: the rest of the context), as a client sending it now would.
func (v *Virtual) Submit(id int, messages []Message, maxTokens int) (*VirtualRequest, error) {
	prompt := promptTokens(messages)
	limit := v.e.cfg.MaxModelLen - prompt
	if maxTokens > 0 {
		limit = min(limit, maxTokens)
	}
	if limit < 1 {
		return nil, fmt.Errorf("simulator: request %d: prompt of %d tokens leaves no room in a context of %d", id, prompt, v.e.cfg.MaxModelLen)
	}
	s := newSequence(prompt, v.e.cfg.plan(messages, limit))
	r := &VirtualRequest{v: v, s: s, ID: id}
	s.owner = r
	v.e.enqueue(s)
	return r, nil
}

// SubmitLength is Submit with the answer's length set to tokens (cut by
// max_tokens as any answer is) instead of drawn from the configured
// distribution: a straggler placed where a study of the ETA wants it.
func (v *Virtual) SubmitLength(id int, messages []Message, maxTokens, tokens int) (*VirtualRequest, error) {
	r, err := v.Submit(id, messages, maxTokens)
	if err != nil {
		return nil, err
	}
	a := &r.s.answer
	limit := v.e.cfg.MaxModelLen - r.s.prompt
	if maxTokens > 0 {
		limit = min(limit, maxTokens)
	}
	a.tokens, a.finishReason = max(tokens, 1), finishStop
	if a.tokens > limit {
		a.tokens, a.finishReason = limit, finishLength
	}
	a.reasoning = min(int(float64(a.tokens)*v.e.cfg.reasoningFraction()), a.tokens-1)
	return r, nil
}

// AdvanceTo runs every engine step that ends by t (simulated time since
// the engine started). Time spent idle passes without steps.
func (v *Virtual) AdvanceTo(t time.Duration) {
	if t <= v.now {
		return
	}
	v.now = t
	for {
		v.e.credit = v.now - v.e.clock
		steps := v.e.steps
		v.e.advance()
		v.e.fresh = v.e.fresh[:0]
		if v.e.order.Len() == 0 && v.e.waiting.Len() == 0 {
			v.e.clock = v.now // idle: the clock runs on without steps
			return
		}
		if v.e.steps == steps {
			return // the next step ends after t
		}
	}
}

// Now returns the simulated time reached.
func (v *Virtual) Now() time.Duration { return v.now }

// Stats returns the engine's figures, the same a server's /metrics
// reports.
func (v *Virtual) Stats() Stats {
	st, _ := v.e.snapshot()
	return st
}

// Tokens returns how many tokens the request has streamed so far: zero
// while it waits or its prompt is read, and what it had generated while
// it waits again after a preemption.
func (r *VirtualRequest) Tokens() int {
	switch r.s.phase {
	case phaseDecoding:
		return int(r.v.e.steps - r.s.base)
	case phaseDone:
		return r.s.answer.tokens
	}
	return r.s.kept
}

// Preemptions returns how often the request was preempted for lack of
// KV cache.
func (r *VirtualRequest) Preemptions() int { return r.s.preemptions }

// Length returns the answer's length in tokens, known from the start.
func (r *VirtualRequest) Length() int { return r.s.answer.tokens }

// Truncated reports whether the answer stops at max_tokens.
func (r *VirtualRequest) Truncated() bool { return r.s.answer.finishReason == finishLength }

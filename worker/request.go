package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/flights"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// requester sends a worker's requests to its backend, each through its
// flight, for the single prompts, the turns of conversations, the
// samples of a message and the hedges alike. A request's failure is
// classified once, here (policy.Classify), and the breaker, the metrics
// and the settling of its prompt all read that one classification. The
// zero value is not usable; New makes it.
type requester struct {
	backend Backend
	health  *breaker
	metrics *metrics
	// priority is the priority every request carries (0: none; see
	// Config.YieldToServing).
	priority int

	// generating counts the requests at the backend, and most the most
	// at once; pace measures them. Each request's goroutine writes them.
	generating, most atomic.Int64
	pace             pace
}

// Request is the request a worker of run m sends for msgs with params
// (the run's, overridden by the prompt's own, for one sample): every
// parameter under its request name, and return_token_ids when the run
// asks for token ids. `aerie doctor` asks its test question the same way,
// so that a parameter the backend refuses is found before the run starts.
func Request(m *schema.Manifest, msgs []openai.Message, params schema.Params) openai.ChatRequest {
	return openai.ChatRequest{
		Model:              m.Model,
		Messages:           msgs,
		MaxTokens:          params.MaxTokens,
		Temperature:        params.Temperature,
		TopP:               params.TopP,
		TopK:               params.TopK,
		MinP:               params.MinP,
		PresencePenalty:    params.PresencePenalty,
		FrequencyPenalty:   params.FrequencyPenalty,
		RepetitionPenalty:  params.RepetitionPenalty,
		Seed:               params.Seed,
		Stop:               params.Stop,
		ReasoningEffort:    params.ReasoningEffort,
		ChatTemplateKwargs: params.ChatTemplateKwargs,
		ExtraBody:          params.ExtraBody,
		ReturnTokenIDs:     m.ReturnTokenIDs,
	}
}

// request is the request for msgs with params, of l's run, with the
// worker's priority.
func (q *requester) request(l *lane, msgs []openai.Message, params schema.Params) openai.ChatRequest {
	req := Request(l.manifest, msgs, params)
	req.Priority = q.priority
	return req
}

// send sends req through f, which the caller keeps in the flights
// registry, and returns its completion: the request can be handed back
// or cancelled for a hedge until it ends (see flights.Flight.Ended), its
// tokens count for l as they stream, and an answer the server ended
// itself, or without the token ids the run asks for, is a failure. A
// failure comes back as the *policy.Failure that classifies it.
func (q *requester) send(ctx context.Context, l *lane, f *flights.Flight, req openai.ChatRequest) (*openai.Completion, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f.Send(cancel)
	q.started()
	comp, err := q.backend.ChatStream(rctx, req, func(n int) {
		f.Streamed(n)
		l.n.tokens.Add(int64(n))
	})
	err = f.Ended(err, ctx.Err() != nil)
	if err == nil && comp != nil {
		q.pace.add(comp.TTFT, time.Since(f.Sent()))
	}
	if err == nil {
		err = policy.AnswerFault(comp, req.ReturnTokenIDs)
	}
	q.generating.Add(-1)
	failure := policy.Classify(err)
	q.health.record(failure)
	q.metrics.request(l.run, comp, failure)
	if failure != nil {
		return nil, failure
	}
	return comp, nil
}

// started counts a request sent to the backend.
func (q *requester) started() {
	n := q.generating.Add(1)
	for {
		m := q.most.Load()
		if n <= m || q.most.CompareAndSwap(m, n) {
			return
		}
	}
}

// pace is what a worker's answered requests have shown of its backend:
// the shortest time to first token, and the moving mean of the time a
// request takes from sending to its last token. The zero value has seen
// none.
type pace struct {
	mu        sync.Mutex
	leastTTFT time.Duration
	latency   time.Duration
}

func (p *pace) add(ttft, latency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ttft > 0 && (p.leastTTFT == 0 || ttft < p.leastTTFT) {
		p.leastTTFT = ttft
	}
	p.latency = policy.NextLatency(p.latency, latency)
}

// reading is the pace as a decision sees it.
func (p *pace) reading() policy.PaceReading {
	p.mu.Lock()
	defer p.mu.Unlock()
	return policy.PaceReading{Latency: p.latency, LeastTTFT: p.leastTTFT}
}

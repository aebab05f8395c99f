package worker

import (
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// job is one delivered unit (a prompt and sample) being answered. It is
// its delivery goroutine's.
type job struct {
	p *schema.Prompt
	// lane is the run it belongs to.
	lane *lane
	// params are the parameters it is generated with: the run's,
	// overridden by the prompt's own, then by a replay's max_tokens, for
	// its sample.
	params schema.Params
	// lengthBase is the max_tokens of the run and the prompt's own
	// parameters, from which OnLengthRetry's default cap is reckoned.
	lengthBase int
	// all is set with --turns all; k is the number of turns (1 otherwise).
	all bool
	k   int
	// turns are the finished turns, from the first: stored ones (found in
	// the turns stream, or stored by this delivery) then generated ones.
	turns []*schema.Turn
	// stored counts the turns of turns that are in the turns stream.
	stored int
	// model is the model name the backend gave for the last turn.
	model string
	// failed is the turn (from 1) whose failure ended a --turns all
	// conversation; 0 otherwise.
	failed int
	// extracted is the result of a hidden-states sample whose file is
	// published; nil for generation.
	extracted *schema.Result
}

// newJob works out what p, a prompt of l's run, is generated with.
func newJob(l *lane, p *schema.Prompt) *job {
	params := l.manifest.Params
	if p.Params != nil {
		params = params.Override(*p.Params)
	}
	base := params.MaxTokens
	if p.MaxTokens > 0 {
		params.MaxTokens = p.MaxTokens
	}
	j := &job{p: p, lane: l, params: params.ForSample(p.Sample), lengthBase: base, k: 1}
	if l.manifest.TurnsMode() == schema.TurnsAll {
		j.all, j.k = true, schema.TurnSlots(p.Messages)
	}
	return j
}

// messages is the prompt's conversation as sent (--turns last).
func (j *job) messages() []openai.Message {
	msgs := make([]openai.Message, len(j.p.Messages))
	for i, m := range j.p.Messages {
		msgs[i] = openai.Message{Role: m.Role, Content: m.Content}
	}
	return msgs
}

// answer is a completion and the max_tokens it was generated with.
type answer struct {
	*openai.Completion
	maxTokens int
}

// turn is turn i of j, answered a by the worker named worker, as it is
// stored.
func (j *job) turn(i int, a *answer, worker string) *schema.Turn {
	j.lane.n.turns.Add(1)
	if a.Model != "" {
		j.model = a.Model
	}
	return &schema.Turn{
		Run: j.lane.run, ID: j.p.ID, Sample: j.p.Sample, Index: i,
		Answer: schema.Message{
			Role: "assistant", Content: a.Content, Reasoning: a.Reasoning, FinishReason: a.FinishReason,
			Usage:          &schema.Usage{PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens},
			PromptTokenIDs: a.PromptTokenIDs, TokenIDs: a.TokenIDs,
		},
		MaxTokens: a.maxTokens, Worker: worker,
		TTFTMillis: a.TTFT.Milliseconds(), LatencyMs: a.Latency.Milliseconds(),
		FinishedAt: time.Now().UTC(),
		Simulated:  a.SystemFingerprint == schema.SimulatedFingerprint,
	}
}

// result is the result of j, whose turns are finished, on its attempt-th
// delivery to the worker named worker: with --turns all, the last turn's
// context with every earlier answer in it, the last turn's answer, and
// usage summed over the turns.
func (j *job) result(attempt int, worker string) *schema.Result {
	if j.extracted != nil {
		return j.extracted
	}
	last := j.turns[len(j.turns)-1]
	params := j.params
	params.MaxTokens = last.MaxTokens
	r := &schema.Result{
		Run: j.lane.run, ID: j.p.ID, Sample: j.p.Sample, Messages: j.p.Messages,
		Model: j.lane.manifest.Model, Params: params,
		Reasoning: last.Answer.Reasoning, Content: last.Answer.Content, FinishReason: last.Answer.FinishReason,
		Truncated: last.Answer.FinishReason == "length",
		Worker:    worker, Attempts: attempt,
		TTFTMillis: last.TTFTMillis, LatencyMs: last.LatencyMs,
		FinishedAt:     time.Now().UTC(),
		Turns:          len(j.turns),
		PromptTokenIDs: last.Answer.PromptTokenIDs, TokenIDs: last.Answer.TokenIDs,
		LengthHint: j.p.LengthHint,
	}
	if j.all {
		r.Messages = turnContext(j.p.Messages, j.turns, len(j.turns)-1)
		if planned := schema.TurnSlots(j.p.Messages); planned > len(j.turns) {
			r.TurnsPlanned = planned
		}
	}
	for _, t := range j.turns {
		if u := t.Answer.Usage; u != nil {
			r.PromptTokens += u.PromptTokens
			r.CompletionTokens += u.CompletionTokens
		}
		r.Simulated = r.Simulated || t.Simulated
	}
	if j.model != "" {
		r.Model = j.model
	}
	return r
}

// lastTurnTokens is the completion tokens of j's last turn.
func (j *job) lastTurnTokens() int {
	if len(j.turns) == 0 || j.turns[len(j.turns)-1].Answer.Usage == nil {
		return 0
	}
	return j.turns[len(j.turns)-1].Answer.Usage.CompletionTokens
}

// truncated reports whether j's answer stopped at max_tokens.
func (j *job) truncated() bool {
	return j != nil && len(j.turns) > 0 && j.turns[len(j.turns)-1].Answer.FinishReason == "length"
}

// turnContext returns the messages of turn i of a conversation: msgs up
// to its i-th assistant placeholder (all of them for the last turn), each
// earlier placeholder replaced by the answer of its turn in turns.
func turnContext(msgs []schema.Message, turns []*schema.Turn, i int) []schema.Message {
	out := make([]schema.Message, 0, len(msgs))
	seen := 0
	for _, m := range msgs {
		if m.Role == "assistant" {
			if seen == i {
				break
			}
			out = append(out, turns[seen].Answer)
			seen++
			continue
		}
		out = append(out, m)
	}
	return out
}

package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// process handles one delivered prompt from decode to acknowledgement. l
// holds a window slot on entry, and gives it back once the last request
// is over, before the outcome is stored.
func (w *Worker) process(ctx context.Context, ln *lane, msg jetstream.Msg, l *lease) {
	generated := sync.OnceFunc(func() { ln.n.active.Add(-1) })
	defer generated()
	meta, err := msg.Metadata()
	if err != nil {
		// Not a JetStream message: nothing to acknowledge.
		ln.log.Error("message without JetStream metadata", "subject", msg.Subject(), "err", err)
		return
	}
	d := &delivery{msg: msg, attempt: int(meta.NumDelivered), seq: meta.Sequence.Stream, progress: w.startProgress(ln, msg), lane: ln, replies: w.replies}
	if d.attempt > 1 {
		ln.cameBack.Add(1)
	}
	defer d.progress.stop()
	defer ln.hedgedBy.Delete(d.seq)
	p, err := decodePrompt(msg)
	if err != nil {
		w.settle(ctx, d, nil, poison(err))
		return
	}
	if p.SampleCount() > 1 && ln.manifest.TurnsMode() != schema.TurnsAll {
		w.processSamples(ctx, d, p, l, generated)
		return
	}
	j := newJob(ln, p)
	defer func() { ln.n.interimTurns.Add(-int64(j.stored)) }()
	if d.attempt > 1 {
		settled, err := w.settledBefore(ctx, d, j)
		if err != nil {
			l.release()
			generated()
			w.settle(ctx, d, j, err)
			return
		}
		if settled {
			return
		}
	}
	if ln.slowForHint(p.LengthHint, d.attempt) {
		l.release()
		generated()
		w.settle(ctx, d, j, errSlowForHint)
		return
	}
	if j.all {
		err = w.converse(ctx, d, j, l)
	} else {
		err = w.answerLast(ctx, d, j)
	}
	// No request of this prompt will generate again: its slot goes to the
	// next prompt while this one is stored and acknowledged, which under
	// load takes as long as a short answer.
	l.release()
	generated()
	if errors.Is(err, errAnswered) {
		w.settleAnswered(ctx, d, j)
		return
	}
	w.settle(ctx, d, j, err)
}

// job is one delivered unit (a prompt and sample) being answered.
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

// answerLast generates the answer to the conversation as given (--turns
// last): one request.
func (w *Worker) answerLast(ctx context.Context, d *delivery, j *job) error {
	msgs := make([]openai.Message, len(j.p.Messages))
	for i, m := range j.p.Messages {
		msgs[i] = openai.Message{Role: m.Role, Content: m.Content}
	}
	t, err := w.generateTurn(ctx, d, j, 0, msgs)
	if err != nil {
		return err
	}
	j.turns = append(j.turns, t)
	return nil
}

// generateTurn asks the backend for turn i of j, sent msgs, under the
// run's on-length policy, and returns it as a finished turn.
func (w *Worker) generateTurn(ctx context.Context, d *delivery, j *job, i int, msgs []openai.Message) (*schema.Turn, error) {
	// A last delivery is never handed back at the end of the run: it
	// would not come again.
	f := &flight{lane: d.lane, last: d.lane.lastDelivery(d.attempt), hint: j.p.LengthHint, attempt: d.attempt,
		seq: d.seq, unit: j.p.Unit()}
	w.inFlight.Store(d.seq, f)
	defer w.inFlight.Delete(d.seq)
	return w.askTurn(ctx, j, i, msgs, f)
}

// askTurn is generateTurn through flight f, which the caller keeps in
// inFlight.
func (w *Worker) askTurn(ctx context.Context, j *job, i int, msgs []openai.Message, f *flight) (*schema.Turn, error) {
	req := Request(j.lane.manifest, msgs, j.params)
	if w.cfg.YieldToServing {
		req.Priority = w.cfg.BatchPriority
	}
	a, err := w.generate(ctx, j, req, f)
	if err != nil {
		return nil, err
	}
	return w.turnOf(j, i, a), nil
}

// turnOf is turn i of j, answered a, as it is stored.
func (w *Worker) turnOf(j *job, i int, a *answer) *schema.Turn {
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
		MaxTokens: a.maxTokens, Worker: w.cfg.Name,
		TTFTMillis: a.TTFT.Milliseconds(), LatencyMs: a.Latency.Milliseconds(),
		FinishedAt: time.Now().UTC(),
		Simulated:  a.SystemFingerprint == schema.SimulatedFingerprint,
	}
}

// answer is a completion and the max_tokens it was generated with.
type answer struct {
	*openai.Completion
	maxTokens int
}

// generate asks the backend for an answer to req and applies the run's
// on-length policy: keep a truncated answer (flagged), turn it into an
// error, or ask again with twice the max_tokens up to the policy's cap.
func (w *Worker) generate(ctx context.Context, j *job, req openai.ChatRequest, f *flight) (*answer, error) {
	policy := j.lane.manifest.Policy
	for {
		f.tokens.Store(0)
		w.startGenerating()
		comp, err := w.chat(ctx, f, req, func(n int) {
			f.tokens.Add(int64(n))
			j.lane.n.tokens.Add(int64(n))
		})
		if err == nil {
			err = aborted(comp)
		}
		if err == nil && req.ReturnTokenIDs && lacksTokenIDs(comp) {
			// Stored without them, the answer would be useless to the
			// run; the backend is at fault, not the prompt.
			err = errNoTokenIDs
		}
		w.generating.Add(-1)
		w.breaker.record(err)
		w.metrics.request(j.lane.run, comp, err)
		if err != nil {
			return nil, err
		}
		j.lane.n.addAnswer(comp.Usage.CompletionTokens)
		j.lane.lengths.add(comp.Usage.CompletionTokens)
		if !j.all {
			j.lane.addHinted(j.p.LengthHint, comp.Usage.CompletionTokens)
		}
		a := &answer{Completion: comp, maxTokens: req.MaxTokens}
		if comp.FinishReason != "length" {
			return a, nil
		}
		switch policy.Length() {
		case schema.OnLengthKeep:
			return a, nil
		case schema.OnLengthRetry:
			if next := nextBudget(req.MaxTokens, policy.LengthRetryMaxTokens, j.lengthBase); next > req.MaxTokens {
				j.lane.log.Info("answer truncated; asking again with a larger max_tokens", "id", j.p.ID, "sample", j.p.Sample, "max_tokens", next)
				req.MaxTokens = next
				continue
			}
		}
		return nil, &truncatedError{maxTokens: req.MaxTokens, completionTokens: comp.Usage.CompletionTokens}
	}
}

// startGenerating counts a request sent to the backend.
func (w *Worker) startGenerating() {
	n := w.generating.Add(1)
	for {
		m := w.maxGenerating.Load()
		if n <= m || w.maxGenerating.CompareAndSwap(m, n) {
			return
		}
	}
}

// nextBudget doubles max_tokens for a retry of a truncated answer, up to
// limit (zero: four times the run's max_tokens). It returns current when
// there is no room to grow, including when max_tokens is unset (the
// answer filled the context window).
func nextBudget(current, limit, runMax int) int {
	if current <= 0 {
		return current
	}
	if limit <= 0 {
		limit = 4 * runMax
	}
	return max(current, min(2*current, limit))
}

func decodePrompt(msg jetstream.Msg) (*schema.Prompt, error) {
	if err := schema.CheckSchemaHeader(schema.KindPrompt, msg.Headers().Get(schema.HeaderSchema)); err != nil {
		return nil, err
	}
	return schema.DecodePrompt(msg.Data())
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

// poisonError marks a prompt message that cannot be decoded.
type poisonError struct{ err error }

func (e *poisonError) Error() string { return "undecodable prompt message: " + e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

func poison(err error) error { return &poisonError{err: err} }

func isPoison(err error) bool {
	var p *poisonError
	return errors.As(err, &p)
}

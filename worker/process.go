package worker

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// process handles one delivered prompt from decode to acknowledgement.
func (w *Worker) process(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		// Not a JetStream message: nothing to acknowledge.
		w.log.Error("message without JetStream metadata", "subject", msg.Subject(), "err", err)
		return
	}
	d := &delivery{msg: msg, attempt: int(meta.NumDelivered), seq: meta.Sequence.Stream, progress: w.startProgress(msg)}
	defer d.progress.stop()
	p, err := decodePrompt(msg)
	if err != nil {
		w.settle(ctx, d, nil, nil, poison(err))
		return
	}
	if d.attempt > 1 && w.settledBefore(ctx, d, p) {
		return
	}

	f := &flight{}
	w.inFlight.Store(d.seq, f)
	a, err := w.generate(ctx, p, f)
	w.inFlight.Delete(d.seq)
	w.settle(ctx, d, p, a, err)
}

// answer is a completion and the max_tokens it was generated with.
type answer struct {
	*openai.Completion
	maxTokens int
}

// generate asks the backend for p's answer and applies the run's
// on-length policy: keep a truncated answer (flagged), turn it into an
// error, or ask again with twice the max_tokens up to the policy's cap.
func (w *Worker) generate(ctx context.Context, p *schema.Prompt, f *flight) (*answer, error) {
	req := w.request(p)
	policy := w.manifest.Policy
	for {
		f.tokens.Store(0)
		comp, err := w.backend.ChatStream(ctx, req, func(n int) {
			f.tokens.Add(int64(n))
			w.tokens.Add(int64(n))
		})
		w.breaker.record(err)
		if err != nil {
			return nil, err
		}
		a := &answer{Completion: comp, maxTokens: req.MaxTokens}
		if comp.FinishReason != "length" {
			return a, nil
		}
		switch policy.Length() {
		case schema.OnLengthKeep:
			return a, nil
		case schema.OnLengthRetry:
			if next := nextBudget(req.MaxTokens, policy.LengthRetryMaxTokens, w.manifest.Params.MaxTokens); next > req.MaxTokens {
				w.log.Info("answer truncated; asking again with a larger max_tokens", "id", p.ID, "max_tokens", next)
				req.MaxTokens = next
				continue
			}
		}
		return nil, &truncatedError{maxTokens: req.MaxTokens, completionTokens: comp.Usage.CompletionTokens}
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

func (w *Worker) request(p *schema.Prompt) openai.ChatRequest {
	msgs := make([]openai.Message, len(p.Messages))
	for i, m := range p.Messages {
		msgs[i] = openai.Message{Role: m.Role, Content: m.Content}
	}
	maxTokens := w.manifest.Params.MaxTokens
	if p.MaxTokens > 0 {
		maxTokens = p.MaxTokens
	}
	return openai.ChatRequest{
		Model:       w.manifest.Model,
		Messages:    msgs,
		MaxTokens:   maxTokens,
		Temperature: w.manifest.Params.Temperature,
		TopP:        w.manifest.Params.TopP,
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

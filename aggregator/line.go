package aggregator

import (
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// completionLine is one line of completions.jsonl: a complete training
// example with what produced it, one per unit (prompt id and sample). The
// id comes first so that a person (or `head`) sees it at once.
type completionLine struct {
	ID string `json:"id"`
	// Sample is always written, 0 included: the id and the sample name
	// the line together, and a reader grouping the samples of a prompt
	// (or an aggregator reopening the file) then never has to know that a
	// missing sample means the first.
	Sample int `json:"sample"`
	// Messages are the conversation as sent for the last turn; with
	// --turns all its earlier assistant turns are the model's own, each
	// with its reasoning, finish reason, usage and token ids.
	Messages     []schema.Message `json:"messages"`
	Reasoning    string           `json:"reasoning"`
	Content      string           `json:"content"`
	FinishReason string           `json:"finish_reason"`
	Truncated    bool             `json:"truncated,omitempty"`
	// Turns is how many assistant turns were generated: 1 with --turns
	// last.
	Turns int `json:"turns"`
	// TurnsPlanned is set when a kept truncated turn ended the
	// conversation before its last turn: how many it had.
	TurnsPlanned int `json:"turns_planned,omitempty"`
	// Usage is summed over the turns generated.
	Usage schema.Usage `json:"usage"`
	Model string       `json:"model"`
	// Params are the parameters the answer was generated with: the run's,
	// overridden by the prompt's own, for this sample.
	Params     schema.Params `json:"params"`
	Worker     string        `json:"worker"`
	Attempts   int           `json:"attempts"`
	TTFTMillis int64         `json:"ttft_ms"`
	LatencyMs  int64         `json:"latency_ms"`
	FinishedAt time.Time     `json:"finished_at"`
	// Simulated marks an answer of aerie's simulator: rehearsal data that
	// must not pass for a real model's.
	Simulated bool `json:"simulated,omitempty"`
	// PromptTokenIDs and TokenIDs are the last turn's token ids, when the
	// run asked for them (--return-token-ids); last, as they are long.
	PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int `json:"token_ids,omitempty"`
}

func newCompletionLine(r *schema.Result) completionLine {
	return completionLine{
		ID: r.ID, Sample: r.Sample, Messages: r.Messages, Reasoning: r.Reasoning, Content: r.Content,
		FinishReason: r.FinishReason, Truncated: r.Truncated, Turns: max(r.Turns, 1), TurnsPlanned: r.TurnsPlanned,
		Usage: schema.Usage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens},
		Model: r.Model, Params: r.Params, Worker: r.Worker, Attempts: r.Attempts,
		TTFTMillis: r.TTFTMillis, LatencyMs: r.LatencyMs, FinishedAt: r.FinishedAt,
		Simulated: r.Simulated, PromptTokenIDs: r.PromptTokenIDs, TokenIDs: r.TokenIDs,
	}
}

// failedLine is one line of failed.jsonl, one per unit that failed for
// good.
type failedLine struct {
	ID string `json:"id"`
	// Sample is always written, as in completions.jsonl.
	Sample int `json:"sample"`
	// Turn is, with --turns all, the turn that failed, from 1; the turns
	// before it are stored and a replay continues after them.
	Turn     int              `json:"turn,omitempty"`
	Messages []schema.Message `json:"messages"`
	Reason   string           `json:"reason"`
	Status   int              `json:"status,omitempty"`
	Error    string           `json:"error"`
	Body     string           `json:"body,omitempty"`
	Attempts int              `json:"attempts"`
	Worker   string           `json:"worker"`
	FailedAt time.Time        `json:"failed_at"`
	// Params are the prompt's own parameters (its input line's), when it
	// had any; a replay queues it with them.
	Params *schema.Params `json:"params,omitempty"`
}

func newFailedLine(d *schema.DeadLetter) failedLine {
	return failedLine{
		ID: d.ID, Sample: d.Sample, Turn: d.Turn, Messages: d.Messages, Reason: d.Reason, Status: d.Status,
		Error: d.Error, Body: d.Body, Attempts: d.Attempts, Worker: d.Worker, FailedAt: d.FailedAt,
		Params: d.Params,
	}
}

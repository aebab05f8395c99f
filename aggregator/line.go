package aggregator

import (
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// completionLine is one line of completions.jsonl: a complete training
// example with what produced it. The id comes first so that a person (or
// `head`) sees it at once.
type completionLine struct {
	ID           string           `json:"id"`
	Messages     []schema.Message `json:"messages"`
	Reasoning    string           `json:"reasoning"`
	Content      string           `json:"content"`
	FinishReason string           `json:"finish_reason"`
	Truncated    bool             `json:"truncated,omitempty"`
	Usage        usage            `json:"usage"`
	Model        string           `json:"model"`
	Params       schema.Params    `json:"params"`
	Worker       string           `json:"worker"`
	Attempts     int              `json:"attempts"`
	TTFTMillis   int64            `json:"ttft_ms"`
	LatencyMs    int64            `json:"latency_ms"`
	FinishedAt   time.Time        `json:"finished_at"`
	// Simulated marks an answer of aerie's simulator: rehearsal data that
	// must not pass for a real model's.
	Simulated bool `json:"simulated,omitempty"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

func newCompletionLine(r *schema.Result) completionLine {
	return completionLine{
		ID: r.ID, Messages: r.Messages, Reasoning: r.Reasoning, Content: r.Content,
		FinishReason: r.FinishReason, Truncated: r.Truncated,
		Usage: usage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens},
		Model: r.Model, Params: r.Params, Worker: r.Worker, Attempts: r.Attempts,
		TTFTMillis: r.TTFTMillis, LatencyMs: r.LatencyMs, FinishedAt: r.FinishedAt,
		Simulated: r.Simulated,
	}
}

// failedLine is one line of failed.jsonl.
type failedLine struct {
	ID       string           `json:"id"`
	Messages []schema.Message `json:"messages"`
	Reason   string           `json:"reason"`
	Status   int              `json:"status,omitempty"`
	Error    string           `json:"error"`
	Body     string           `json:"body,omitempty"`
	Attempts int              `json:"attempts"`
	Worker   string           `json:"worker"`
	FailedAt time.Time        `json:"failed_at"`
}

func newFailedLine(d *schema.DeadLetter) failedLine {
	return failedLine{
		ID: d.ID, Messages: d.Messages, Reason: d.Reason, Status: d.Status,
		Error: d.Error, Body: d.Body, Attempts: d.Attempts, Worker: d.Worker, FailedAt: d.FailedAt,
	}
}

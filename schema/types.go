package schema

import (
	"fmt"
	"time"
)

// Version is the schema version this build writes and the only one it
// reads. A change that old readers cannot ignore bumps it.
const Version = 1

// Message is one chat turn.
type Message struct {
	Role    string `msgpack:"role" json:"role"`
	Content string `msgpack:"content" json:"content"`
}

// Params are the sampling parameters of a run. Nil pointers mean "not
// sent": the backend's default applies.
type Params struct {
	// MaxTokens caps completion tokens; zero lets the backend fill the
	// context window.
	MaxTokens   int      `msgpack:"max_tokens,omitempty" json:"max_tokens,omitempty"`
	Temperature *float64 `msgpack:"temperature,omitempty" json:"temperature,omitempty"`
	TopP        *float64 `msgpack:"top_p,omitempty" json:"top_p,omitempty"`
}

// Prompt is one unit of work: the conversation to complete.
type Prompt struct {
	V        int       `msgpack:"v"`
	Run      string    `msgpack:"run"`
	ID       string    `msgpack:"id"`
	Messages []Message `msgpack:"messages"`
	// Source is "<file>:<line>" of the input line, for error reports.
	Source string `msgpack:"source,omitempty"`
	// MaxTokens, when positive, overrides the run's max_tokens for this
	// prompt (a replay with a larger budget for a truncated answer).
	MaxTokens int `msgpack:"max_tokens,omitempty"`
}

// Result is a prompt's answer as a worker received it. It repeats the
// prompt's messages so that the aggregator writes a complete training
// example without looking anything up.
type Result struct {
	V            int       `msgpack:"v"`
	Run          string    `msgpack:"run"`
	ID           string    `msgpack:"id"`
	Messages     []Message `msgpack:"messages"`
	Model        string    `msgpack:"model"`
	Params       Params    `msgpack:"params"`
	Reasoning    string    `msgpack:"reasoning"`
	Content      string    `msgpack:"content"`
	FinishReason string    `msgpack:"finish_reason"`
	// Truncated is set when the answer stopped at max_tokens
	// (finish_reason "length") and the run keeps such answers.
	Truncated bool `msgpack:"truncated,omitempty"`
	// PromptTokens and CompletionTokens are the backend's usage figures;
	// completion tokens include reasoning tokens.
	PromptTokens     int    `msgpack:"prompt_tokens"`
	CompletionTokens int    `msgpack:"completion_tokens"`
	Worker           string `msgpack:"worker"`
	// Attempts is the JetStream delivery count of the successful attempt.
	Attempts   int       `msgpack:"attempts"`
	TTFTMillis int64     `msgpack:"ttft_ms"`
	LatencyMs  int64     `msgpack:"latency_ms"`
	FinishedAt time.Time `msgpack:"finished_at"`
	// Simulated is set when the answer came from aerie's simulator (it
	// says so in system_fingerprint; see SimulatedFingerprint), so that
	// rehearsal data cannot pass for a real model's.
	Simulated bool `msgpack:"simulated,omitempty"`
}

// SimulatedFingerprint is the system_fingerprint aerie's simulator puts in
// every response. A worker that sees it marks the result Simulated.
const SimulatedFingerprint = "aerie-simulator"

// Reason classes of a dead letter.
const (
	// ReasonPermanent: the backend rejected the request in a way that will
	// not change on retry (400, e.g. the prompt exceeds the context length).
	ReasonPermanent = "permanent"
	// ReasonExhausted: the last allowed delivery failed.
	ReasonExhausted = "retries-exhausted"
	// ReasonPoison: the prompt message itself could not be decoded.
	ReasonPoison = "poison"
	// ReasonTruncated: the answer hit max_tokens and the run's policy
	// (OnLength "dead-letter", or "retry" past its cap) does not keep it.
	ReasonTruncated = "truncated"
)

// Reasons lists every dead-letter reason class.
var Reasons = []string{ReasonPermanent, ReasonExhausted, ReasonPoison, ReasonTruncated}

// What to do with an answer cut at max_tokens (finish_reason "length").
const (
	// OnLengthKeep writes it to completions.jsonl, flagged truncated.
	OnLengthKeep = "keep"
	// OnLengthDeadLetter sends it to failed.jsonl instead.
	OnLengthDeadLetter = "dead-letter"
	// OnLengthRetry asks again with twice the max_tokens, up to
	// Policy.LengthRetryMaxTokens, then dead-letters it.
	OnLengthRetry = "retry"
)

// DefaultMaxAttempts is how many failures attributable to a prompt (a
// 500, a timeout, a cut stream while the backend is otherwise healthy)
// it may have before it is dead-lettered. Failures during a backend
// outage do not count: they say nothing about the prompt.
const DefaultMaxAttempts = 5

// Policy is how a run treats failures and truncated answers. It is part
// of the manifest so that every worker applies the same; the zero value
// means the defaults: 5 attempts, keep truncated answers.
type Policy struct {
	MaxAttempts int    `json:"max_attempts,omitempty"`
	OnLength    string `json:"on_length,omitempty"`
	// LengthRetryMaxTokens caps max_tokens when OnLength is "retry"; zero
	// means four times the run's max_tokens.
	LengthRetryMaxTokens int `json:"length_retry_max_tokens,omitempty"`
}

// Attempts is MaxAttempts or its default.
func (p Policy) Attempts() int {
	if p.MaxAttempts > 0 {
		return p.MaxAttempts
	}
	return DefaultMaxAttempts
}

// Length is OnLength or its default.
func (p Policy) Length() string {
	if p.OnLength == "" {
		return OnLengthKeep
	}
	return p.OnLength
}

// Validate checks the policy's values.
func (p Policy) Validate() error {
	switch p.Length() {
	case OnLengthKeep, OnLengthDeadLetter, OnLengthRetry:
	default:
		return fmt.Errorf("on-length %q: use keep, dead-letter or retry", p.OnLength)
	}
	if p.MaxAttempts < 0 || p.LengthRetryMaxTokens < 0 {
		return fmt.Errorf("max attempts and length retry max tokens must not be negative")
	}
	return nil
}

// DeadLetter records why a prompt could not be completed. It keeps the
// prompt, so replay needs nothing else.
type DeadLetter struct {
	V        int       `msgpack:"v"`
	Run      string    `msgpack:"run"`
	ID       string    `msgpack:"id"`
	Messages []Message `msgpack:"messages"`
	Reason   string    `msgpack:"reason"`
	// Status is the last HTTP status from the backend, 0 if none.
	Status int `msgpack:"status,omitempty"`
	// Error is the last error, and Body the backend's response body,
	// bounded to MaxErrorBody bytes.
	Error    string    `msgpack:"error"`
	Body     string    `msgpack:"body,omitempty"`
	Attempts int       `msgpack:"attempts"`
	Worker   string    `msgpack:"worker"`
	FailedAt time.Time `msgpack:"failed_at"`
	// PromptSeq is the stream sequence of the prompt message whose
	// delivery failed. A prompt queued again (replay, reconcile) has a new
	// sequence, so a worker meeting a stored dead letter can tell its own
	// earlier failure of the same message (settle at once) from one left
	// by an earlier copy. Zero when unknown.
	PromptSeq uint64 `msgpack:"prompt_seq,omitempty"`
}

// MaxErrorBody bounds the response body kept in a dead letter: enough for
// any error JSON vLLM sends, small enough that a misbehaving proxy's HTML
// page does not bloat the stream.
const MaxErrorBody = 4096

// Manifest describes a run: what every worker generates with. It is JSON
// in the RunsBucket so that `nats kv get aerie-runs <run>` is readable.
// Changing any of it means a new run.
type Manifest struct {
	V         int       `json:"v"`
	Run       string    `json:"run"`
	Model     string    `json:"model"`
	Params    Params    `json:"params"`
	Policy    Policy    `json:"policy"`
	Total     int       `json:"total"`
	Source    string    `json:"source"`
	Producer  string    `json:"producer"`
	CreatedAt time.Time `json:"created_at"`
	// PromptsDigest identifies the set of prompts of the run (ids,
	// messages, per-prompt parameters), whatever their order in the file,
	// so that producing the run again from an edited file is refused.
	// Empty in manifests written before it existed.
	PromptsDigest string `json:"prompts_digest,omitempty"`
}

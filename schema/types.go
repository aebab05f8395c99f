package schema

import "time"

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
}

// Reason classes of a dead letter.
const (
	// ReasonPermanent: the backend rejected the request in a way that will
	// not change on retry (400, e.g. the prompt exceeds the context length).
	ReasonPermanent = "permanent"
	// ReasonExhausted: the last allowed delivery failed.
	ReasonExhausted = "retries-exhausted"
	// ReasonPoison: the prompt message itself could not be decoded.
	ReasonPoison = "poison"
)

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
	Total     int       `json:"total"`
	Source    string    `json:"source"`
	Producer  string    `json:"producer"`
	CreatedAt time.Time `json:"created_at"`
}

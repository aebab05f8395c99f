package schema

import (
	"fmt"
	"time"
)

// Version is the schema version of the wire messages (Prompt, Result,
// DeadLetter, Turn) this build writes and the only one it reads. What
// old readers cannot ignore is a feature (see FeatureSamples): named in
// the manifest, which old readers then do not read (ManifestVersion),
// and in each message's HeaderNeeds.
const Version = 1

// Manifest versions. A manifest whose run needs no feature is version 1,
// which every aerie reads; one that needs any is version 2 and lists them
// (Manifest.Needs). Builds from before features existed read version 1
// only, so they leave such a run alone ("run manifest cannot be read")
// instead of handling work they do not understand.
const (
	ManifestVersion1 = 1
	ManifestVersion  = 2
)

// Message is one chat turn. Role and Content are all an input message
// has; an assistant turn that aerie generated (an earlier turn of a
// conversation regenerated with --turns all) also carries what the model
// returned with it, so that the training example keeps the model's own
// reasoning, finish reason, usage and token ids for every turn.
type Message struct {
	Role    string `msgpack:"role" json:"role"`
	Content string `msgpack:"content" json:"content"`
	// Reasoning is the model's thinking for a generated turn; empty for
	// input turns and for answers without reasoning.
	Reasoning    string `msgpack:"reasoning,omitempty" json:"reasoning,omitempty"`
	FinishReason string `msgpack:"finish_reason,omitempty" json:"finish_reason,omitempty"`
	Usage        *Usage `msgpack:"usage,omitempty" json:"usage,omitempty"`
	// PromptTokenIDs and TokenIDs are the backend's token ids of the
	// prompt it rendered for this turn and of the answer, when the run
	// asked for them (Manifest.ReturnTokenIDs).
	PromptTokenIDs []int `msgpack:"prompt_token_ids,omitempty" json:"prompt_token_ids,omitempty"`
	TokenIDs       []int `msgpack:"token_ids,omitempty" json:"token_ids,omitempty"`
}

// Usage is a backend's token count for one request, or a sum of them.
// Completion tokens include reasoning tokens.
type Usage struct {
	PromptTokens     int `msgpack:"prompt_tokens" json:"prompt_tokens"`
	CompletionTokens int `msgpack:"completion_tokens" json:"completion_tokens"`
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
	// prompt (a replay with a larger budget for a truncated answer). It
	// wins over Params.MaxTokens.
	MaxTokens int `msgpack:"max_tokens,omitempty"`
	// Sample is which of the run's Manifest.Samples this message asks
	// for, from 0. Each sample is queued, answered, failed and replayed on
	// its own (see Unit).
	Sample int `msgpack:"sample,omitempty"`
	// Samples, when above 1, makes the message ask for that many samples
	// from Sample on, in one request (vLLM's n: the prompt is read once
	// for all of them). Each sample is still answered, failed and
	// replayed on its own, as its own unit (see Units); a replay queues
	// one sample alone. Zero or 1: the message is the one sample.
	Samples int `msgpack:"samples,omitempty"`
	// Params, when not nil, are the input line's own parameters: they
	// override the run's for this prompt (see Params.Override).
	Params *Params `msgpack:"params,omitempty"`
	// LengthHint is the tokens the answer is expected to take, from the
	// input (dataset.Line.LengthHint); zero for none. The producer orders
	// the queue by it, and the finished answers say how well it
	// predicted their length. It is not part of what the prompt asks, so
	// not of its digest.
	LengthHint int `msgpack:"length_hint,omitempty"`
	// InputIDs and LossMask are an extraction sample's token ids and
	// training mask (TaskHiddenStates); its ID is its row number.
	InputIDs []int64 `msgpack:"input_ids,omitempty"`
	LossMask []int   `msgpack:"loss_mask,omitempty"`
}

// Unit is the prompt's unit of work: its id and sample; for a message of
// several samples, the first.
func (p *Prompt) Unit() Unit { return Unit{ID: p.ID, Sample: p.Sample} }

// SampleCount is how many samples the message asks for: Samples, or 1.
func (p *Prompt) SampleCount() int { return max(p.Samples, 1) }

// Sampled returns the prompt of sample Sample+k alone: a copy of p
// asking for that one sample.
func (p *Prompt) Sampled(k int) *Prompt {
	q := *p
	q.Sample, q.Samples = p.Sample+k, 0
	return &q
}

// Result is a prompt's answer as a worker received it. It repeats the
// prompt's messages so that the aggregator writes a complete training
// example without looking anything up.
//
// With --turns all, Messages is the prompt of the last turn as it was
// sent, in which every earlier assistant turn is the model's own answer
// (with its Reasoning, FinishReason, Usage and token ids), and Reasoning,
// Content and FinishReason are the last turn's answer.
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
	// PromptTokens and CompletionTokens are the backend's usage figures,
	// summed over the turns generated; completion tokens include
	// reasoning tokens.
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
	// Sample is the sample this result answers (see Prompt.Sample).
	Sample int `msgpack:"sample,omitempty"`
	// Turns is how many assistant turns were generated: 1 with --turns
	// last; with --turns all, every turn of the conversation, or fewer
	// when a turn was cut at max_tokens and kept (Truncated). Zero in
	// results written before it existed, which had one.
	Turns int `msgpack:"turns,omitempty"`
	// TurnsPlanned is, when a kept truncated turn ended the conversation
	// early, how many turns it had (schema.TurnSlots of the prompt): the
	// turns after Turns will never be generated. Zero otherwise.
	TurnsPlanned int `msgpack:"turns_planned,omitempty"`
	// PromptTokenIDs and TokenIDs are the last turn's token ids, when the
	// run asked for them.
	PromptTokenIDs []int `msgpack:"prompt_token_ids,omitempty"`
	TokenIDs       []int `msgpack:"token_ids,omitempty"`
	// LengthHint is the prompt's (Prompt.LengthHint), so that the output
	// says how well it predicted CompletionTokens.
	LengthHint int `msgpack:"length_hint,omitempty"`
	// Hedged is set when the answer is a hedge's: a second copy of the
	// request, sent by Worker at the end of the run while a slower
	// worker still generated the first, and stored first.
	Hedged bool `msgpack:"hedged,omitempty"`
	// HiddenStates is an extraction sample's published file; InputIDs
	// and LossMask are the sample's, so that the aggregator writes its
	// output row without looking anything up.
	HiddenStates *HiddenStatesFile `msgpack:"hidden_states,omitempty"`
	InputIDs     []int64           `msgpack:"input_ids,omitempty"`
	LossMask     []int             `msgpack:"loss_mask,omitempty"`
}

// Unit is the result's unit of work: its id and sample.
func (r *Result) Unit() Unit { return Unit{ID: r.ID, Sample: r.Sample} }

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
	// Sample is the sample that failed (see Prompt.Sample).
	Sample int `msgpack:"sample,omitempty"`
	// Turn is, with --turns all, the turn that failed, from 1; the turns
	// before it are stored (TurnsStream) and a replay continues from it.
	// Zero with --turns last.
	Turn int `msgpack:"turn,omitempty"`
	// Params are the prompt's own parameters (Prompt.Params), kept so
	// that a replay queues the prompt as it was.
	Params *Params `msgpack:"params,omitempty"`
	// InputIDs and LossMask are an extraction sample's (Prompt.InputIDs),
	// kept so that a replay queues it as it was.
	InputIDs []int64 `msgpack:"input_ids,omitempty"`
	LossMask []int   `msgpack:"loss_mask,omitempty"`
}

// Unit is the dead letter's unit of work: its id and sample.
func (d *DeadLetter) Unit() Unit { return Unit{ID: d.ID, Sample: d.Sample} }

// MaxErrorBody bounds the response body kept in a dead letter: enough for
// any error JSON vLLM sends, small enough that a misbehaving proxy's HTML
// page does not bloat the stream.
const MaxErrorBody = 4096

// Manifest describes a run: what every worker generates with. It is JSON
// in the RunsBucket so that `nats kv get aerie-runs <run>` is readable.
// Changing any of it means a new run, except its Schedule, which says
// how the run shares workers with other runs and may change at any time
// (`aerie runs set`).
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
	// Turns is TurnsLast (empty in manifests written before it existed)
	// or TurnsAll.
	Turns string `json:"turns,omitempty"`
	// ContextReasoning says what goes back into the context of a later
	// turn with TurnsAll: ContextReasoningDrop (empty) sends earlier
	// answers as content only, ContextReasoningKeep adds their reasoning
	// as reasoning_content.
	ContextReasoning string `json:"context_reasoning,omitempty"`
	// Samples is how many independent answers each prompt gets; zero
	// means one.
	Samples int `json:"samples,omitempty"`
	// SamplesPerMessage is how many samples each prompt message asks for
	// (Prompt.Samples): Samples when a prompt's samples are answered in
	// one request (vLLM's n), which `aerie produce` does with --turns
	// last; zero or 1 when each sample is a message of its own (--turns
	// all, and runs produced before it existed, which a resumed produce
	// goes on queuing that way).
	SamplesPerMessage int `json:"samples_per_message,omitempty"`
	// ReturnTokenIDs asks the backend (vLLM's return_token_ids) for the
	// token ids of every prompt and answer, stored with each turn.
	ReturnTokenIDs bool `json:"return_token_ids,omitempty"`
	// Prompts is the number of prompts; Total, the number of output lines
	// expected, is Prompts x Samples. Zero in manifests written before it
	// existed, whose Total counts prompts.
	Prompts int `json:"prompts,omitempty"`
	// TotalTurns is the number of requests the run makes when every turn
	// succeeds: Total with TurnsLast, the sum of every conversation's
	// turns (times Samples) with TurnsAll. Zero means Total.
	TotalTurns int `json:"total_turns,omitempty"`
	// Task is the run's task kind; empty means TaskChat. A kind other
	// than chat is a feature (TaskFeature).
	Task string `json:"task,omitempty"`
	// Extraction is what a TaskHiddenStates run extracts; nil otherwise.
	Extraction *Extraction `json:"extraction,omitempty"`
	// Needs lists the features a reader must implement to handle the run
	// (see FeatureSamples), sorted: those its settings use (Uses) and any
	// it was produced to need besides. EncodeManifest and DecodeManifest
	// complete it, so that a manifest of version 1, which has none
	// stored, says what its settings use all the same.
	Needs []string `json:"needs,omitempty"`
	// WrittenBy is the aerie version that produced the run, one that
	// implements every feature of Needs: what a reader lacking one names
	// as the version to upgrade to. Empty in manifests written before it
	// existed.
	WrittenBy string `json:"written_by,omitempty"`
	Schedule
}

// Schedule is how a run shares the workers that serve several runs. The
// zero value is priority 0, weight 1, not paused: runs produced before it
// existed share equally.
type Schedule struct {
	// Priority orders runs: a worker's free slots go to the runs of the
	// highest priority that have prompts waiting; lower ones get what
	// those leave.
	Priority int `json:"priority,omitempty"`
	// Weight shares the free slots between runs of equal priority, in
	// proportion, counted in generated tokens; zero means 1.
	Weight float64 `json:"weight,omitempty"`
	// Paused stops workers from pulling the run's prompts; those they
	// hold finish.
	Paused bool `json:"paused,omitempty"`
}

// DefaultWeight is a run's weight when its manifest gives none.
const DefaultWeight = 1

// Share is the weight in force: Weight, or DefaultWeight.
func (s Schedule) Share() float64 {
	if s.Weight > 0 {
		return s.Weight
	}
	return DefaultWeight
}

// TurnsMode is Turns or its default, TurnsLast.
func (m *Manifest) TurnsMode() string {
	if m.Turns == "" {
		return TurnsLast
	}
	return m.Turns
}

// PerMessage is SamplesPerMessage or its default, 1.
func (m *Manifest) PerMessage() int { return max(m.SamplesPerMessage, 1) }

// SampleCount is Samples or its default, 1.
func (m *Manifest) SampleCount() int { return max(m.Samples, 1) }

// MaxAnswerTokens is the most tokens one request of the run may
// generate: its max_tokens, or with --on-length retry the cap of the
// retries (four times max_tokens unless set). Zero when the run sets no
// max_tokens: only the context length bounds an answer then.
func (m *Manifest) MaxAnswerTokens() int {
	if m.Params.MaxTokens <= 0 {
		return 0
	}
	if m.Policy.Length() == OnLengthRetry {
		if m.Policy.LengthRetryMaxTokens > 0 {
			return max(m.Policy.LengthRetryMaxTokens, m.Params.MaxTokens)
		}
		return 4 * m.Params.MaxTokens
	}
	return m.Params.MaxTokens
}

// Requests is TotalTurns or its default, Total.
func (m *Manifest) Requests() int {
	if m.TotalTurns > 0 {
		return m.TotalTurns
	}
	return m.Total
}

package simulator

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Reasoning fields a Config can use, as servers spell them.
const (
	// ReasoningFieldReasoning is vLLM's field since about 0.11:
	// message.reasoning and delta.reasoning.
	ReasoningFieldReasoning = "reasoning"
	// ReasoningFieldReasoningContent is SGLang's field and older vLLM's:
	// message.reasoning_content and delta.reasoning_content.
	ReasoningFieldReasoningContent = "reasoning_content"
	// ReasoningFieldThink puts the reasoning inline at the start of
	// content, between <think> and </think>, as servers do when no
	// reasoning parser is configured.
	ReasoningFieldThink = "think"
)

// LengthPreset is a named shape of answer lengths (OutputMedian and
// OutputSigma).
type LengthPreset struct {
	Median int
	Sigma  float64
}

// LengthPresets are the shapes `aerie sim --lengths` knows: the reference
// run's (a mean of about 2,200 tokens, the default), and a reasoning
// model's heavy tail on short answers, a mean of 300 tokens with σ 1.2, a
// few answers in 6,000 past 10,000 tokens (docs/eta.md, "Heavy tails").
var LengthPresets = map[string]LengthPreset{
	"reference":  {Median: DefaultOutputMedian, Sigma: DefaultOutputSigma},
	"heavy-tail": {Median: 146, Sigma: 1.2},
}

// Scheduling policies (Config.SchedulingPolicy), by vLLM's names.
const (
	SchedulingFCFS     = "fcfs"
	SchedulingPriority = "priority"
)

// Defaults. The calibration values approximate Kimi-K2.5 INT4 served by
// vLLM with tensor parallelism over eight PCIe GPUs (RTX PRO 6000
// Blackwell) at a client concurrency of 200, assuming prompts of about
// 1,000 tokens; docs/simulator.md shows how they were derived from that
// run's numbers.
const (
	DefaultModel          = "moonshotai/Kimi-K2.5"
	DefaultMaxModelLen    = 262144
	DefaultMaxNumSeqs     = 256
	DefaultSpeed          = 1.0
	DefaultReasoningField = ReasoningFieldReasoning

	DefaultStepBase        = 30 * time.Millisecond
	DefaultStepPerSeq      = 100 * time.Microsecond
	DefaultPrefillPerToken = 140 * time.Microsecond
	DefaultOutputMedian    = 1400
	DefaultOutputSigma     = 0.95
	DefaultReasoningShare  = 0.75
	DefaultKVCacheTokens   = 1_250_000
	DefaultPrefixCache     = 4096

	// Kimi-K2.5's: 61 layers of 7,168, a vocabulary of 163,840 tokens.
	DefaultHiddenSize  = 7168
	DefaultHiddenDType = "BF16"
	DefaultVocabSize   = 163840
)

// DefaultHiddenLayerIDs are the layers speculators' launcher extracts
// from a model of 61 layers: 2, L/2, L-3 and L, the last layer's output
// before the final norm.
var DefaultHiddenLayerIDs = []int{2, 30, 58, 61}

// Config describes the simulated server. The zero value of every field
// means its default (see WithDefaults); New applies them.
type Config struct {
	// Addr is the address a caller may listen on. New does not use it;
	// it is here so one struct carries the whole server setup.
	Addr string

	// Model is the only model served; requests naming another get 404
	// as from vLLM. An empty model in a request means this one. It can
	// be changed while the server runs through /admin/model. Default
	// "moonshotai/Kimi-K2.5".
	Model string

	// APIKey, when set, must be sent as "Authorization: Bearer <key>"
	// with every request to a path under /v1, as with `vllm serve
	// --api-key`; a request without it gets 401 with vLLM's body
	// {"error":"Unauthorized"}. /health, /metrics and /admin/ stay open.
	// It can be changed or removed while the server runs through
	// /admin/api-key. The server never logs it or puts it in an error.
	// Default "": no key required.
	APIKey string

	// MaxModelLen is the context length in tokens: prompt plus
	// completion must fit. Default 262144 (Kimi-K2.5's).
	MaxModelLen int

	// MaxNumSeqs caps the running sequences (vLLM's --max-num-seqs);
	// further requests wait in an unbounded queue. Default 256, vLLM's
	// usual default.
	MaxNumSeqs int

	// SchedulingPolicy is vLLM's --scheduling-policy: SchedulingFCFS
	// (empty, the default) serves the queue first come first served and
	// refuses a request with a priority other than 0, as vLLM does;
	// SchedulingPriority orders the queue by each request's priority
	// (lower first), then arrival, and, when the KV cache runs out,
	// preempts the running request of the lowest priority (the highest
	// value), the latest to arrive among equals, as vLLM's scheduler.
	SchedulingPolicy string

	// Engine is the engine the server speaks as: EngineVLLM (empty, the
	// default), EngineSGLang, EngineTRTLLM or EngineLlamaCpp. It sets
	// owned_by in /v1/models, the reasoning field (unless ReasoningField
	// says), how the priority field reads (SchedulingPolicy priority
	// turns priority scheduling on for each: SGLang's
	// --enable-priority-scheduling, TensorRT-LLM's priority queue
	// policy), where token ids come back, whether n above 1 and fields
	// the engine does not know are refused, and the names and path of
	// the metrics. docs/simulator.md lists each dialect with its source.
	Engine string

	// LowPriorityFirst makes the SGLang dialect serve lower priority
	// values first, as SGLang started with
	// --schedule-low-priority-values-first (its default is higher
	// first); /get_server_info says so. Other dialects ignore it.
	LowPriorityFirst bool

	// MaxQueued, when positive, bounds the requests waiting for a slot,
	// as SGLang's --max-queued-requests: a request that finds that many
	// waiting is refused with SGLang's 503. Zero: an unbounded queue, as
	// vLLM's.
	MaxQueued int

	// NoMetrics serves no Prometheus metrics, as SGLang without
	// --enable-metrics or llama.cpp without --metrics.
	NoMetrics bool

	// Speed scales time: 200 means simulated time runs 200 times faster
	// than wall time. Default 1 (real time).
	Speed float64

	// ReasoningField is where reasoning goes in responses: "reasoning"
	// (vLLM since about 0.11), "reasoning_content" (SGLang, older vLLM)
	// or "think" (inline <think>...</think> at the start of content).
	// Default "reasoning".
	ReasoningField string

	// Seed changes every answer's length and text, and which requests
	// get injected faults. Lengths, text and faults are deterministic
	// per prompt content, sampling fields and seed, except the answers
	// of requests with a temperature above 0 and no seed of their own,
	// which are random (see the package documentation). Zero is a valid
	// seed and the default.
	Seed int64

	// StepBase and StepPerSeq give the simulated time of one decode
	// step: StepBase + StepPerSeq*batchSize. Defaults 30ms and 100µs:
	// about 33 tokens/s for a lone sequence and 20 tokens/s each (4,000
	// tokens/s in all) at a batch of 200. On the calibration hardware
	// about half of a step is all-reduce over PCIe, which does not
	// shrink with the batch, hence the large base. A negative StepPerSeq
	// means none: every step takes StepBase, as for a server whose
	// decode time per token is flat up to MaxNumSeqs.
	StepBase, StepPerSeq time.Duration

	// PrefillPerToken is the engine time spent per prompt token. Prefill
	// runs in chunks inside decode steps (chunked prefill, 8,192 tokens
	// per step), so a burst of new prompts slows every running sequence.
	// Default 140µs, about 7,000 prompt tokens/s. A negative value means
	// prompts cost nothing.
	PrefillPerToken time.Duration

	// OutputMedian and OutputSigma shape the answer length: lognormal
	// with this median (tokens) and sigma, at least one token, capped by
	// the request's max_tokens. Defaults 1400 and 0.95: mean about 2,200
	// tokens, yet the shortest tenth of answers average under 300, which
	// is why early completions make averages and ETAs misleading.
	OutputMedian int
	OutputSigma  float64

	// ReasoningShare is the fraction of an answer's tokens that are
	// reasoning, emitted before the content; content always gets at
	// least one token. Default 0.75, a thinking model's typical split
	// (an assumption, not a measurement). A negative value means no
	// reasoning at all.
	ReasoningShare float64

	// KVCacheTokens is the KV cache capacity in tokens (vLLM logs it at
	// start as "GPU KV cache size"), held in blocks of 16 tokens. A
	// waiting request is admitted only when the blocks of its first
	// prompt chunk fit; a decode step that needs blocks the cache lacks
	// preempts the most recently admitted running request, which goes
	// back to the front of the queue and later prefills its prompt and
	// what it had generated again (vLLM's recompute preemption). It
	// must hold one sequence of MaxModelLen, as vLLM refuses to start
	// otherwise. Default 1,250,000: the calibrated steady state (about
	// 740,000 tokens held) reads about 0.6, and its peaks (under 970,000
	// tokens over 25,000-prompt runs) never preempt.
	KVCacheTokens int

	// PrefixCache is how many prompts the engine's prefix cache keeps,
	// least recently used out first; negative turns it off
	// (`vllm serve --no-enable-prefix-caching`). vLLM's V1 engine caches
	// prefixes by default, and a prompt repeated within a batch hits the
	// cache too, so the n answers of one request (parallel sampling) read
	// their prompt once: a prompt found in the cache reads only what is
	// past its last whole block of 16 tokens, and at least its last
	// token, as vLLM. Only whole prompts are matched, not a prompt that
	// merely starts like another (a conversation's next turn); the cached
	// blocks count in KV usage as each sequence's own. Reported as
	// vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total,
	// in tokens. Default DefaultPrefixCache.
	PrefixCache int

	// Faults injects errors, hangs, disconnects, slow first bytes and
	// outages. The zero value injects nothing.
	Faults Faults

	// HiddenStatesPath, when set, makes the server extract hidden states
	// as vLLM's extract_hidden_states method with its hidden-states
	// connector writing to this directory (shared_storage_path): each
	// /v1/completions request's prompt states go to
	// <path>/<request id>.safetensors, written after the reply under an
	// exclusive lock on the file's .lock, their path in the reply's
	// kv_transfer_params. Empty, the default: /v1/completions only
	// answers.
	HiddenStatesPath string
	// HiddenLayerIDs are the layers extracted
	// (eagle_aux_hidden_state_layer_ids); default DefaultHiddenLayerIDs.
	// HiddenSize is the model's hidden size and HiddenDType the files'
	// dtype (BF16, F16 or F32); defaults DefaultHiddenSize and
	// DefaultHiddenDType. The values are hiddenstates.Synthetic of each
	// token, position, layer id and dimension.
	HiddenLayerIDs []int
	HiddenSize     int
	HiddenDType    string
	// VocabSize bounds the token ids of a prompt; default
	// DefaultVocabSize.
	VocabSize int
	// FileFaults injects faults into the extracted files; the zero value
	// injects none.
	FileFaults FileFaults
}

// WithDefaults returns c with every zero field set to its default.
// ReasoningShare 0 also means the default; use a negative value for no
// reasoning.
func (c Config) WithDefaults() Config {
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = DefaultMaxModelLen
	}
	if len(c.HiddenLayerIDs) == 0 {
		c.HiddenLayerIDs = DefaultHiddenLayerIDs
	}
	if c.HiddenSize == 0 {
		c.HiddenSize = DefaultHiddenSize
	}
	if c.HiddenDType == "" {
		c.HiddenDType = DefaultHiddenDType
	}
	if c.VocabSize == 0 {
		c.VocabSize = DefaultVocabSize
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.Speed == 0 {
		c.Speed = DefaultSpeed
	}
	if c.Engine == "" {
		c.Engine = EngineVLLM
	}
	if c.ReasoningField == "" {
		c.ReasoningField = DefaultReasoningField
		if d, ok := dialects[c.Engine]; ok {
			c.ReasoningField = d.reasoning
		}
	}
	if c.StepBase == 0 {
		c.StepBase = DefaultStepBase
	}
	if c.StepPerSeq == 0 {
		c.StepPerSeq = DefaultStepPerSeq
	}
	if c.PrefillPerToken == 0 {
		c.PrefillPerToken = DefaultPrefillPerToken
	}
	if c.OutputMedian == 0 {
		c.OutputMedian = DefaultOutputMedian
	}
	if c.OutputSigma == 0 {
		c.OutputSigma = DefaultOutputSigma
	}
	if c.ReasoningShare == 0 {
		c.ReasoningShare = DefaultReasoningShare
	}
	if c.PrefixCache == 0 {
		c.PrefixCache = DefaultPrefixCache
	}
	if c.KVCacheTokens == 0 {
		c.KVCacheTokens = DefaultKVCacheTokens
	}
	return c
}

// Validate reports every field that is out of range, as one error.
// Call it on a config with defaults applied: zero values are invalid.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("simulator: "+format, args...))
	}
	if c.Model == "" {
		bad("model must not be empty")
	}
	if _, ok := dialects[c.Engine]; !ok && c.Engine != "" {
		bad("engine %q: use one of %s", c.Engine, strings.Join(Engines(), ", "))
	}
	if c.SchedulingPolicy != "" && c.SchedulingPolicy != SchedulingFCFS && c.SchedulingPolicy != SchedulingPriority {
		bad("scheduling policy %q: use %s or %s", c.SchedulingPolicy, SchedulingFCFS, SchedulingPriority)
	}
	if err := checkAPIKey(c.APIKey); err != nil {
		bad("%v", err)
	}
	if c.MaxModelLen < 2 {
		bad("max model len must be >= 2, got %d", c.MaxModelLen)
	}
	if c.HiddenSize < 1 || c.VocabSize < 1 {
		bad("hidden size and vocab size must be >= 1, got %d and %d", c.HiddenSize, c.VocabSize)
	}
	switch c.HiddenDType {
	case "BF16", "F16", "F32":
	default:
		bad("hidden dtype %q: use BF16, F16 or F32", c.HiddenDType)
	}
	errs = append(errs, c.FileFaults.validate()...)
	for _, id := range c.HiddenLayerIDs {
		if id < 0 {
			bad("hidden layer ids must not be negative, got %d", id)
		}
	}
	if c.MaxNumSeqs < 1 {
		bad("max num seqs must be >= 1, got %d", c.MaxNumSeqs)
	}
	if !(c.Speed > 0) || math.IsInf(c.Speed, 0) {
		bad("speed must be > 0, got %v", c.Speed)
	}
	switch c.ReasoningField {
	case ReasoningFieldReasoning, ReasoningFieldReasoningContent, ReasoningFieldThink:
	default:
		bad("reasoning field must be %q, %q or %q, got %q",
			ReasoningFieldReasoning, ReasoningFieldReasoningContent, ReasoningFieldThink, c.ReasoningField)
	}
	if c.StepBase <= 0 {
		bad("step base must be > 0, got %v", c.StepBase)
	}
	if c.OutputMedian < 1 {
		bad("output median must be >= 1, got %d", c.OutputMedian)
	}
	if !(c.OutputSigma >= 0) || c.OutputSigma > 5 {
		bad("output sigma must be in [0, 5], got %v", c.OutputSigma)
	}
	if math.IsNaN(c.ReasoningShare) || c.ReasoningShare >= 1 {
		bad("reasoning share must be < 1, got %v", c.ReasoningShare)
	}
	if c.KVCacheTokens < 1 {
		bad("kv cache tokens must be >= 1, got %d", c.KVCacheTokens)
	} else if c.KVCacheTokens < c.MaxModelLen {
		bad("kv cache tokens (%d) cannot hold one sequence of max model len (%d); raise kv cache tokens or lower max model len",
			c.KVCacheTokens, c.MaxModelLen)
	}
	errs = append(errs, c.Faults.validate()...)
	return errors.Join(errs...)
}

// reasoningFraction is the share of tokens that are reasoning, with a
// negative ReasoningShare meaning none.
func (c Config) reasoningFraction() float64 {
	return max(c.ReasoningShare, 0)
}

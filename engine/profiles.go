package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/aerie-dev/aerie/openai"
)

// Name names an engine as --engine spells it.
type Name string

// The engines aerie knows.
const (
	VLLM     Name = "vllm"
	SGLang   Name = "sglang"
	TRTLLM   Name = "trtllm"
	LlamaCpp Name = "llamacpp"
)

// TokenIDs is how an engine returns the token ids of a chat answer.
type TokenIDs int

const (
	// TokenIDsStreamed: on streamed and unstreamed answers alike
	// (return_token_ids, vLLM 0.10.2 and later).
	TokenIDsStreamed TokenIDs = iota
	// TokenIDsUnstreamed: only on answers that are not streamed; a
	// stream that asks for them is refused (SGLang).
	TokenIDsUnstreamed
	// TokenIDsNone: not on chat answers at all.
	TokenIDsNone
)

// LoadMetrics names the Prometheus series that tell how loaded a server
// is, which --window auto reads. Empty names are series the engine does
// not have; Running and Waiting are required for the automatic window.
type LoadMetrics struct {
	// Path is where the Prometheus text is served.
	Path string
	// Running and Waiting are the requests in the batch and in the
	// queue; KVUsage the fraction of the KV cache in use (0 to 1);
	// Preemptions a counter of requests pushed out of the batch; TTFT a
	// histogram of time to first token in seconds. Each lists the names
	// the series has had, newest first: the first one present is read.
	Running, Waiting, KVUsage, Preemptions, TTFT []string
	// Enable is how the server is started so that it serves them, when
	// that is not by default.
	Enable string
}

// Priority is what an engine does with a request's priority.
type Priority struct {
	// Supported: the engine orders its queue by a request field.
	Supported bool
	// Enable is how the server is started so that it does.
	Enable string
	// Scale maps aerie's priority onto the engine's field.
	Scale openai.PriorityScale
	// Describe says, in a few words, the engine's field and its order.
	Describe string
}

// Profile is one engine: plain values, read by the client (Dialect), the
// worker (Load) and the doctor (everything).
type Profile struct {
	Name Name
	// Title is how people write the engine's name.
	Title string
	// OwnedBy is the owned_by of the engine's /v1/models cards.
	OwnedBy string
	// MetricPrefix begins the names of the engine's own metrics.
	MetricPrefix string
	// Dialect is what the client sends and reads differently for it.
	Dialect openai.Dialect
	// Reasoning is the answer field reasoning comes back in, and
	// ReasoningEnable how the server is started so that it does.
	Reasoning, ReasoningEnable string
	// TokenIDs is how the token ids of chat answers come back.
	TokenIDs TokenIDs
	// Priority is the engine's request priority.
	Priority Priority
	// SamplesByN says a chat request may ask for several answers (n);
	// otherwise they go as one request each (Dialect.SamplesAsRequests).
	SamplesByN bool
	// Load is the metrics --window auto reads.
	Load LoadMetrics
	// ErrorsInStream says a failure after a stream began comes as
	// data: {"error": ...} inside the 200 stream.
	ErrorsInStream bool
	// Busy is what the engine answers when its queue is full.
	Busy string
	// Health is the path that answers 200 while the engine is alive.
	Health string
	// ExtraFields says the engine ignores request fields it does not
	// know; false means it refuses them (400), so a field the run adds
	// through --extra-body must be one of the engine's own.
	ExtraFields bool
	// Source is where the profile's facts were read.
	Source string
}

// profiles is every engine aerie knows, in the order they are tried and
// listed. The facts come from each engine's protocol source at the
// version named in Source; docs/engines.md lists them with their
// sources.
var profiles = []Profile{
	{
		Name: VLLM, Title: "vLLM", OwnedBy: "vllm", MetricPrefix: "vllm:",
		Reasoning: "reasoning", ReasoningEnable: "--reasoning-parser NAME",
		TokenIDs: TokenIDsStreamed,
		Priority: Priority{Supported: true, Enable: "--scheduling-policy priority",
			Describe: "integer priority, lower first; any other value than 0 refused without the policy"},
		SamplesByN: true,
		Load: LoadMetrics{Path: "/metrics", Running: []string{"vllm:num_requests_running"}, Waiting: []string{"vllm:num_requests_waiting"},
			KVUsage: []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}, Preemptions: []string{"vllm:num_preemptions_total", "vllm:num_preemptions"}, TTFT: []string{"vllm:time_to_first_token_seconds"}},
		ErrorsInStream: true, Busy: "requests wait in its queue", Health: "/health", ExtraFields: true,
		Source: "vllm entrypoints/openai (0.17)",
	},
	{
		Name: SGLang, Title: "SGLang", OwnedBy: "sglang", MetricPrefix: "sglang:",
		Dialect:   openai.Dialect{TokenIDsUnstreamed: true, Priority: openai.PriorityScale{HigherFirst: true}},
		Reasoning: "reasoning_content", ReasoningEnable: "--reasoning-parser NAME",
		TokenIDs: TokenIDsUnstreamed,
		Priority: Priority{Supported: true, Enable: "--enable-priority-scheduling",
			Describe: "integer priority, higher first (lower first with --schedule-low-priority-values-first)"},
		SamplesByN: true,
		Load: LoadMetrics{Path: "/metrics", Running: []string{"sglang:num_running_reqs"}, Waiting: []string{"sglang:num_queue_reqs"},
			KVUsage: []string{"sglang:token_usage"}, TTFT: []string{"sglang:time_to_first_token_seconds"}, Enable: "--enable-metrics"},
		ErrorsInStream: true, Busy: "503 when its queue is full", Health: "/health", ExtraFields: true,
		Source: "sglang python/sglang/srt/entrypoints/openai/protocol.py at 004c82e",
	},
	{
		Name: TRTLLM, Title: "TensorRT-LLM", OwnedBy: "tensorrt_llm", MetricPrefix: "trtllm_",
		Dialect:   openai.Dialect{Priority: openai.PriorityScale{Unit: 0.05, Default: 0.5}, MetricsPath: "/prometheus/metrics"},
		Reasoning: "reasoning_content", ReasoningEnable: "--reasoning_parser NAME",
		TokenIDs: TokenIDsNone,
		Priority: Priority{Supported: true, Enable: "scheduler_config: waiting_queue_policy: priority (in --extra_llm_api_options)",
			Describe: "number in [0, 1], higher first, 0.5 when unset; ignored without the priority queue policy"},
		SamplesByN: true,
		Load: LoadMetrics{Path: "/prometheus/metrics", Running: []string{"trtllm_num_requests_running"}, Waiting: []string{"trtllm_num_requests_waiting"},
			KVUsage: []string{"trtllm_kv_cache_utilization"}, TTFT: []string{"trtllm_time_to_first_token_seconds"}, Enable: "return_perf_metrics: true (in --extra_llm_api_options)"},
		ErrorsInStream: true, Busy: "requests wait in its queue", Health: "/health", ExtraFields: false,
		Source: "TensorRT-LLM tensorrt_llm/serve/openai_protocol.py at 0076e93, tensorrt_llm/metrics/collector.py at 050f80d",
	},
	{
		Name: LlamaCpp, Title: "llama.cpp", OwnedBy: "llamacpp", MetricPrefix: "llamacpp:",
		Dialect:   openai.Dialect{SamplesAsRequests: true},
		Reasoning: "reasoning_content", ReasoningEnable: "--reasoning-format deepseek",
		TokenIDs: TokenIDsNone,
		Priority: Priority{Describe: "no request priority"},
		Load: LoadMetrics{Path: "/metrics", Running: []string{"llamacpp:requests_processing"}, Waiting: []string{"llamacpp:requests_deferred"},
			KVUsage: []string{"llamacpp:kv_cache_usage_ratio"}, Enable: "--metrics"},
		ErrorsInStream: true, Busy: "requests wait until a slot frees (deferred)", Health: "/health", ExtraFields: true,
		Source: "llama.cpp tools/server (README.md, server-context.cpp)",
	},
}

// Profiles returns every engine's profile, vLLM first.
func Profiles() []Profile { return slices.Clone(profiles) }

// Names lists the engines, as --engine takes them.
func Names() []string {
	out := make([]string, len(profiles))
	for i, p := range profiles {
		out[i] = string(p.Name)
	}
	return out
}

// Lookup returns the profile of the engine named name (case and a few
// common spellings forgiven: "tensorrt-llm", "llama.cpp").
func Lookup(name string) (Profile, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	switch n {
	case "tensorrt-llm", "tensorrt_llm", "trt-llm", "trtllm-serve":
		n = string(TRTLLM)
	case "llama.cpp", "llama-server", "llama-cpp":
		n = string(LlamaCpp)
	}
	for _, p := range profiles {
		if string(p.Name) == n {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("unknown engine %q: want one of %s, or auto", name, strings.Join(Names(), ", "))
}

// Default is vLLM's profile, which a Client with a zero Dialect speaks.
func Default() Profile { return profiles[0] }

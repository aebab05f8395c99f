package simulator

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
)

// Engines the simulator speaks as (Config.Engine), by aerie's names for
// them. Each dialect below is written from that engine's protocol
// source, independently of aerie's client (package engine), so that the
// tests of one check the other: SGLang's python/sglang/srt/entrypoints/
// openai/protocol.py and serving_chat.py at 004c82e; TensorRT-LLM's
// tensorrt_llm/serve/openai_protocol.py at 0076e93 and tensorrt_llm/
// metrics/collector.py at 050f80d; llama.cpp's tools/server.
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineTRTLLM   = "trtllm"
	EngineLlamaCpp = "llamacpp"
)

// priorityKind is how a dialect reads a request's priority field.
type priorityKind int

const (
	priorityLowFirst  priorityKind = iota // vLLM: an integer, lower first
	priorityHighFirst                     // SGLang: an integer, higher first
	priorityUnit                          // TensorRT-LLM: a number in [0, 1], higher first, 0.5 unset
	priorityNone                          // llama.cpp: no such field (ignored)
)

// tokenIDsKind is where a dialect returns token ids on chat answers.
type tokenIDsKind int

const (
	idsStreamed   tokenIDsKind = iota // vLLM: streamed and whole, prompt ids beside the choices
	idsUnstreamed                     // SGLang: whole answers only, on each choice; a stream asking for them is refused
	idsNone                           // TensorRT-LLM, llama.cpp: none on chat
)

// metricNames are a dialect's names for the series the simulator serves;
// empty ones it does not serve.
type metricNames struct {
	running, waiting, kvUsage, preemptions, genTokens, promptTokens, successTotal, ttft string
	prefixQueries, prefixHits, waitingByReason                                          string
}

// dialect is what the simulator does differently as one engine.
type dialect struct {
	name, ownedBy string
	// reasoning is the answer field reasoning goes in by default.
	reasoning string
	priority  priorityKind
	tokenIDs  tokenIDsKind
	// oneAnswer: n above 1 is refused on chat.
	oneAnswer bool
	// fields, when not nil, are the only request fields accepted: any
	// other is refused with a 400, as pydantic's extra="forbid" does;
	// streamOptions likewise for stream_options.
	fields, streamOptions []string
	// metricsPath is where the Prometheus text is served; jsonMetrics,
	// when set, is a path that serves JSON instead (TensorRT-LLM's
	// /metrics).
	metricsPath, jsonMetrics string
	metrics                  metricNames
	// serverInfo: GET /get_server_info describes the server (SGLang).
	serverInfo bool
}

var vllmMetrics = metricNames{
	running: "vllm:num_requests_running", waiting: "vllm:num_requests_waiting",
	waitingByReason: "vllm:num_requests_waiting_by_reason",
	kvUsage:         "vllm:kv_cache_usage_perc", preemptions: "vllm:num_preemptions_total",
	genTokens: "vllm:generation_tokens_total", promptTokens: "vllm:prompt_tokens_total",
	prefixQueries: "vllm:prefix_cache_queries_total", prefixHits: "vllm:prefix_cache_hits_total",
	successTotal: "vllm:request_success_total", ttft: "vllm:time_to_first_token_seconds",
}

// trtllmFields are the fields of TensorRT-LLM's ChatCompletionRequest,
// which forbids any other.
var trtllmFields = []string{
	"messages", "prompt_token_ids", "prompt_token_ids_b64", "model", "frequency_penalty", "logit_bias", "logprobs",
	"top_logprobs", "max_tokens", "max_completion_tokens", "n", "presence_penalty", "response_format", "seed", "stop",
	"stream", "stream_options", "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls", "user",
	"reasoning_effort", "thinking", "thinking_token_budget", "prompt_ignore_length", "best_of", "use_beam_search",
	"top_k", "top_p_min", "min_p", "repetition_penalty", "length_penalty", "early_stopping", "stop_token_ids",
	"include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens",
	"truncate_prompt_tokens", "lora_request", "echo", "add_generation_prompt", "add_special_tokens", "documents",
	"chat_template", "chat_template_kwargs", "injected_chat_template_kwargs", "media_io_kwargs",
	"disaggregated_params", "conversation_params", "cache_salt", "priority", "agent_hierarchy", "mm_processor_kwargs",
}

var dialects = map[string]dialect{
	EngineVLLM: {name: EngineVLLM, ownedBy: "vllm", reasoning: ReasoningFieldReasoning,
		metricsPath: "/metrics", metrics: vllmMetrics},
	EngineSGLang: {name: EngineSGLang, ownedBy: "sglang", reasoning: ReasoningFieldReasoningContent,
		priority: priorityHighFirst, tokenIDs: idsUnstreamed, serverInfo: true, metricsPath: "/metrics",
		metrics: metricNames{running: "sglang:num_running_reqs", waiting: "sglang:num_queue_reqs",
			kvUsage: "sglang:token_usage", genTokens: "sglang:generation_tokens_total",
			promptTokens: "sglang:prompt_tokens_total", ttft: "sglang:time_to_first_token_seconds",
			prefixHits: "sglang:cached_tokens_total"}},
	EngineTRTLLM: {name: EngineTRTLLM, ownedBy: "tensorrt_llm", reasoning: ReasoningFieldReasoningContent,
		priority: priorityUnit, tokenIDs: idsNone, fields: trtllmFields,
		streamOptions: []string{"include_usage", "continuous_usage_stats"},
		metricsPath:   "/prometheus/metrics", jsonMetrics: "/metrics",
		metrics: metricNames{running: "trtllm_num_requests_running", waiting: "trtllm_num_requests_waiting",
			kvUsage: "trtllm_kv_cache_utilization", genTokens: "trtllm_generation_tokens_total",
			promptTokens: "trtllm_prompt_tokens_total", successTotal: "trtllm_request_success_total",
			ttft: "trtllm_time_to_first_token_seconds"}},
	EngineLlamaCpp: {name: EngineLlamaCpp, ownedBy: "llamacpp", reasoning: ReasoningFieldReasoningContent,
		priority: priorityNone, tokenIDs: idsNone, oneAnswer: true, metricsPath: "/metrics",
		metrics: metricNames{running: "llamacpp:requests_processing", waiting: "llamacpp:requests_deferred",
			kvUsage: "llamacpp:kv_cache_usage_ratio", genTokens: "llamacpp:tokens_predicted_total",
			promptTokens: "llamacpp:prompt_tokens_total"}},
}

// Engines lists the engines the simulator speaks as.
func Engines() []string {
	out := make([]string, 0, len(dialects))
	for n := range dialects {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// unknownFields names the fields of body a dialect that forbids extra
// fields refuses, as pydantic reports them ("stream_options.x" for one
// inside stream_options); nil when it takes them all.
func (d dialect) unknownFields(body []byte) []string {
	if d.fields == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil // the decoder reports what is wrong with it
	}
	var bad []string
	for k, v := range m {
		if !slices.Contains(d.fields, k) {
			bad = append(bad, k)
			continue
		}
		if k == "stream_options" {
			var so map[string]json.RawMessage
			if json.Unmarshal(v, &so) == nil {
				for sk := range so {
					if !slices.Contains(d.streamOptions, sk) {
						bad = append(bad, k+"."+sk)
					}
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// extraForbidden is pydantic's refusal of extra fields, as a 400.
func extraForbidden(fields []string) *requestError {
	var b strings.Builder
	fmt.Fprintf(&b, "%d validation error(s) for ChatCompletionRequest", len(fields))
	for _, f := range fields {
		fmt.Fprintf(&b, "\n%s\n  Extra inputs are not permitted [type=extra_forbidden]", f)
	}
	return badRequest(fields[0], "%s", b.String())
}

// queueKey reads a request's priority field as the simulator's queue
// key, lower served first (vLLM's order), and reports a value the
// dialect refuses. enabled is whether the server was started with
// priority scheduling (SchedulingPolicy priority).
func (d dialect) queueKey(raw json.RawMessage, enabled, lowFirst bool) (int, *requestError) {
	given := len(raw) > 0 && string(raw) != "null"
	switch d.priority {
	case priorityNone:
		return 0, nil
	case priorityUnit:
		if !given {
			return unitKey(0.5), nil
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, badRequest("priority", "priority: Input should be a valid number")
		}
		if v < 0 || v > 1 || math.IsNaN(v) {
			return 0, badRequest("priority", "priority: Input should be between 0 and 1, got %v", v)
		}
		return unitKey(v), nil
	}
	if !given {
		return 0, nil
	}
	var p int
	if err := json.Unmarshal(raw, &p); err != nil {
		return 0, badRequest("priority", "priority: Input should be a valid integer")
	}
	if d.priority == priorityLowFirst {
		if p != 0 && !enabled {
			return 0, badRequest("", "Got priority %d but Priority scheduling is not enabled.", p)
		}
		return p, nil
	}
	if lowFirst {
		return p, nil // SGLang --schedule-low-priority-values-first
	}
	return -p, nil // SGLang: higher first
}

// unitKey orders TensorRT-LLM's priorities, higher first, as the
// simulator's lower-first keys.
func unitKey(v float64) int { return int(math.Round((1 - v) * 1000)) }

// serveServerInfo answers SGLang's GET /get_server_info with the server
// arguments that matter to a client.
func (s *Server) serveServerInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":                         s.model.get(),
		"served_model_name":                  s.model.get(),
		"context_length":                     s.cfg.MaxModelLen,
		"max_running_requests":               s.cfg.MaxNumSeqs,
		"enable_priority_scheduling":         s.cfg.SchedulingPolicy == SchedulingPriority,
		"schedule_low_priority_values_first": s.cfg.LowPriorityFirst,
		"enable_metrics":                     !s.cfg.NoMetrics,
		"reasoning_parser":                   "kimi_k2",
		"version":                            "aerie-sim",
	})
}

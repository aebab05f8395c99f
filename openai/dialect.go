package openai

import (
	"encoding/json"
	"math"
	"strconv"
)

// Dialect is how a server's chat API differs from vLLM's where aerie's
// requests meet it: the engine profiles (package engine) fill it in from
// what each engine's protocol source says. The zero value is vLLM's
// dialect, so a Client made without one speaks to vLLM as it always has.
type Dialect struct {
	// Priority maps ChatRequest.Priority onto the server's priority
	// field. The zero value sends it unchanged.
	Priority PriorityScale

	// TokenIDsUnstreamed says the server returns token ids only on
	// answers that are not streamed, and refuses return_token_ids on a
	// stream (SGLang). ChatStream then sends a request that asks for ids
	// unstreamed (as Chat does) and reports its tokens to progress once,
	// when the answer is whole; its TTFT is then the whole answer's time.
	TokenIDsUnstreamed bool

	// SamplesAsRequests says the server refuses n above 1 on chat
	// (llama.cpp). ChatStream then sends a request with N above 1 as N
	// requests of one answer each, at once, answer k with Seed+k when
	// Seed is set (as vLLM samples the children of one request), and
	// joins them into one Completion: a failure of any is the failure of
	// all, as it is for one request of N answers.
	SamplesAsRequests bool

	// MetricsPath is where the server serves Prometheus text; empty
	// means /metrics (vLLM, SGLang, llama.cpp). TensorRT-LLM serves
	// JSON at /metrics and Prometheus text at /prometheus/metrics.
	MetricsPath string
}

// PriorityScale maps aerie's request priority onto a server's. aerie's
// priority has vLLM's sense: an integer, 0 for requests that carry none
// (interactive traffic), and a lower value served first. The zero value
// sends it as it is.
type PriorityScale struct {
	// HigherFirst says the server serves higher values first (SGLang's
	// default): the value is negated, so that a batch request still
	// ranks below interactive ones.
	HigherFirst bool

	// Unit, when positive, says the server's priority is a number in
	// [0, 1] with Default for requests that carry none, higher first
	// (TensorRT-LLM's, default 0.5): aerie's p is sent as Default - p ×
	// Unit, held to [0, 1].
	Unit    float64
	Default float64
}

// Encode renders priority p for the request body; nil (the field left
// out) when p is 0, which every engine reads as no priority.
func (s PriorityScale) Encode(p int) json.RawMessage {
	if p == 0 {
		return nil
	}
	if s.Unit > 0 {
		v := math.Min(1, math.Max(0, s.Default-float64(p)*s.Unit))
		return json.RawMessage(strconv.FormatFloat(v, 'g', -1, 64))
	}
	if s.HigherFirst {
		p = -p
	}
	return json.RawMessage(strconv.Itoa(p))
}

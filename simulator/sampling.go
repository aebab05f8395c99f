package simulator

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"

	"github.com/aerie-dev/aerie/schema"
)

// Reasoning effort factors: the reasoning part of an answer is this
// many times as long as at the default (medium) effort. The content part
// keeps its length.
var effortFactors = map[string]float64{
	"minimal": 0.25,
	"low":     0.5,
	"medium":  1,
	"high":    1.5,
}

// sampling is what a request's sampling fields do to its answer.
type sampling struct {
	// key is a hash of the fields that change what is sampled
	// (temperature, top_p, top_k, min_p, the penalties, reasoning_effort,
	// chat_template_kwargs and seed); set is false when none was given,
	// and the answer is then the one a request without them gets.
	key uint64
	set bool
	// random is true when the answer is drawn afresh for this request:
	// no seed, and a temperature above 0.
	random bool
	// effort scales the reasoning part's length (effortFactors).
	effort float64
	// thinking is false when chat_template_kwargs turned thinking off.
	thinking bool
	// stop ends the content before the first of these strings.
	stop []string
	// tokenIDs asks for the token ids of the prompt and the answer.
	tokenIDs bool
}

// defaultSampling is the sampling of a request that sets no field.
var defaultSampling = sampling{effort: 1, thinking: true}

// keyHasher builds sampling.key: each field given is mixed in with a tag
// of its own, so the same value in two fields counts differently.
type keyHasher struct {
	h   uint64
	set bool
}

func (k *keyHasher) add(tag, v uint64) {
	k.h = mix64(k.h ^ mix64(tag<<56^v))
	k.set = true
}

func (k *keyHasher) addFloat(tag uint64, v *float64) {
	if v != nil {
		k.add(tag, math.Float64bits(*v))
	}
}

func (k *keyHasher) addBytes(tag uint64, b []byte) {
	k.add(tag, fnv(b))
}

// fnv is FNV-1a over b.
func fnv[T string | []byte](b T) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(b); i++ {
		h ^= uint64(b[i])
		h *= 1099511628211
	}
	return h
}

// parseSampling checks the sampling fields of req as vLLM does (its
// SamplingParams checks, with the same bounds and wording) and works out
// what they do to the answer.
func parseSampling(req *chatRequest) (sampling, *requestError) {
	sp := defaultSampling
	var k keyHasher
	if t := req.Temperature; t != nil && *t < 0 {
		return sp, badRequest("temperature", "temperature must be non-negative, got %v.", *t)
	}
	if p := req.TopP; p != nil && (*p <= 0 || *p > 1) {
		return sp, badRequest("top_p", "top_p must be in (0, 1], got %v.", *p)
	}
	if v := req.TopK; v != nil && *v < -1 {
		return sp, badRequest("top_k", "top_k must be 0 (disable), -1 (disable), or at least 1, got %d.", *v)
	}
	if v := req.MinP; v != nil && (*v < 0 || *v > 1) {
		return sp, badRequest("min_p", "min_p must be in [0, 1], got %v.", *v)
	}
	if v := req.PresencePenalty; v != nil && (*v < -2 || *v > 2) {
		return sp, badRequest("presence_penalty", "presence_penalty must be in [-2, 2], got %v.", *v)
	}
	if v := req.FrequencyPenalty; v != nil && (*v < -2 || *v > 2) {
		return sp, badRequest("frequency_penalty", "frequency_penalty must be in [-2, 2], got %v.", *v)
	}
	if v := req.RepetitionPenalty; v != nil && *v <= 0 {
		return sp, badRequest("repetition_penalty", "repetition_penalty must be greater than zero, got %v.", *v)
	}
	stop, ok := parseStop(req.Stop)
	if !ok {
		return sp, badRequest("stop", "stop must be a string or a list of strings.")
	}
	sp.stop = stop
	if e := req.ReasoningEffort; e != nil {
		f, ok := effortFactors[*e]
		if !ok {
			return sp, badRequest("reasoning_effort", "reasoning_effort must be one of 'low', 'medium', 'high' or 'minimal', got '%s'.", *e)
		}
		sp.effort = f
		k.addBytes(1, []byte(*e))
	}
	if raw := bytes.TrimSpace(req.ChatTemplateKwargs); len(raw) > 0 && string(raw) != "null" {
		canon, err := schema.CanonicalObject(raw)
		if err != nil {
			return sp, badRequest("chat_template_kwargs", "chat_template_kwargs must be an object: %v.", err)
		}
		sp.thinking = thinkingOn(canon)
		k.addBytes(2, canon)
	}
	k.addFloat(3, req.Temperature)
	k.addFloat(4, req.TopP)
	if req.TopK != nil {
		k.add(5, uint64(*req.TopK))
	}
	k.addFloat(6, req.MinP)
	k.addFloat(7, req.PresencePenalty)
	k.addFloat(8, req.FrequencyPenalty)
	k.addFloat(9, req.RepetitionPenalty)
	if req.Seed != nil {
		k.add(10, uint64(*req.Seed))
	}
	sp.key, sp.set = k.h, k.set
	sp.random = req.Seed == nil && req.Temperature != nil && *req.Temperature > 0
	sp.tokenIDs = req.ReturnTokenIDs != nil && *req.ReturnTokenIDs
	return sp, nil
}

// parseStop reads stop: absent, null, a string, or a list of strings.
// Empty strings never match and are dropped.
func parseStop(raw json.RawMessage) ([]string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, true
	}
	var list []string
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, false
		}
		list = []string{s}
	case '[':
		if json.Unmarshal(raw, &list) != nil {
			return nil, false
		}
	default:
		return nil, false
	}
	kept := list[:0]
	for _, s := range list {
		if s != "" {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		return nil, true
	}
	return kept, true
}

// thinkingOn reads the chat template switches that turn thinking off:
// {"enable_thinking": false} (Qwen3 and others) or {"thinking": false}
// (Kimi, DeepSeek). Only a JSON false turns it off.
func thinkingOn(kwargs []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(kwargs, &m) != nil {
		return true
	}
	for _, name := range []string{"enable_thinking", "thinking"} {
		if v, ok := m[name]; ok && string(v) == "false" {
			return false
		}
	}
	return true
}

// requestKey identifies a request's answer: its messages (reasoning
// included), the sampling fields that change sampling, and the
// simulator's seed. Without sampling fields it is promptHash, so such a
// request gets the answer it always got. The injector draws faults from
// it too, so each sample (seed) of a prompt has faults of its own.
func (c Config) requestKey(messages []Message, sp *sampling) uint64 {
	h := promptHash(messages, c.Seed)
	if sp.set {
		h = mix64(h ^ sp.key)
	}
	return h
}

// answerHash is the hash an answer is drawn from: the request's key, or
// for a random request (no seed, temperature above 0) the key mixed with
// a fresh random number.
func (sp *sampling) answerHash(key uint64) uint64 {
	if sp.random {
		return mix64(key ^ rand.Uint64())
	}
	return key
}

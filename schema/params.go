package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Params are the sampling and request parameters of a run, or of one
// prompt (Prompt.Params), named and typed as in an OpenAI chat completion
// request to vLLM. Nil pointers, empty strings and nil slices mean "not
// sent": the backend's default applies (for vLLM, the model's
// generation_config.json). The zero value sends nothing but the
// messages.
type Params struct {
	// MaxTokens caps completion tokens; zero lets the backend fill the
	// context window.
	MaxTokens   int      `msgpack:"max_tokens,omitempty" json:"max_tokens,omitempty"`
	Temperature *float64 `msgpack:"temperature,omitempty" json:"temperature,omitempty"`
	TopP        *float64 `msgpack:"top_p,omitempty" json:"top_p,omitempty"`
	// TopK: -1 or 0 disable it (vLLM); otherwise at least 1.
	TopK              *int     `msgpack:"top_k,omitempty" json:"top_k,omitempty"`
	MinP              *float64 `msgpack:"min_p,omitempty" json:"min_p,omitempty"`
	PresencePenalty   *float64 `msgpack:"presence_penalty,omitempty" json:"presence_penalty,omitempty"`
	FrequencyPenalty  *float64 `msgpack:"frequency_penalty,omitempty" json:"frequency_penalty,omitempty"`
	RepetitionPenalty *float64 `msgpack:"repetition_penalty,omitempty" json:"repetition_penalty,omitempty"`
	// Seed makes sampling reproducible; sample k of a prompt is sent
	// Seed+k (see ForSample), so samples differ and each is reproducible.
	Seed *int64 `msgpack:"seed,omitempty" json:"seed,omitempty"`
	// Stop holds strings that end the answer (not included in it).
	Stop            []string `msgpack:"stop,omitempty" json:"stop,omitempty"`
	ReasoningEffort string   `msgpack:"reasoning_effort,omitempty" json:"reasoning_effort,omitempty"`
	// ChatTemplateKwargs is a JSON object passed to the model's chat
	// template, e.g. {"enable_thinking": false} (Qwen3) or
	// {"thinking": true} (Kimi). Stored canonical (see CanonicalObject).
	ChatTemplateKwargs json.RawMessage `msgpack:"chat_template_kwargs,omitempty" json:"chat_template_kwargs,omitempty"`
	// ExtraBody is a JSON object merged into the request body last, for
	// anything else the server accepts. Stored canonical.
	ExtraBody json.RawMessage `msgpack:"extra_body,omitempty" json:"extra_body,omitempty"`
}

// ReservedBodyKeys are request fields that aerie sets itself and that
// neither per-prompt params nor --extra-body may set.
var ReservedBodyKeys = []string{"model", "messages", "stream", "stream_options", "n", "return_token_ids"}

// IsZero reports whether p sets nothing.
func (p Params) IsZero() bool {
	return p.MaxTokens == 0 && p.Temperature == nil && p.TopP == nil && p.TopK == nil && p.MinP == nil &&
		p.PresencePenalty == nil && p.FrequencyPenalty == nil && p.RepetitionPenalty == nil && p.Seed == nil &&
		p.Stop == nil && p.ReasoningEffort == "" && len(p.ChatTemplateKwargs) == 0 && len(p.ExtraBody) == 0
}

// Override returns p with every parameter that o sets replaced by o's.
// The two JSON objects are merged key by key, o's keys winning, so that a
// prompt can add one template argument to the run's.
func (p Params) Override(o Params) Params {
	if o.MaxTokens != 0 {
		p.MaxTokens = o.MaxTokens
	}
	setPtr(&p.Temperature, o.Temperature)
	setPtr(&p.TopP, o.TopP)
	setPtr(&p.TopK, o.TopK)
	setPtr(&p.MinP, o.MinP)
	setPtr(&p.PresencePenalty, o.PresencePenalty)
	setPtr(&p.FrequencyPenalty, o.FrequencyPenalty)
	setPtr(&p.RepetitionPenalty, o.RepetitionPenalty)
	setPtr(&p.Seed, o.Seed)
	if o.Stop != nil {
		p.Stop = o.Stop
	}
	if o.ReasoningEffort != "" {
		p.ReasoningEffort = o.ReasoningEffort
	}
	p.ChatTemplateKwargs = mergeObjects(p.ChatTemplateKwargs, o.ChatTemplateKwargs)
	p.ExtraBody = mergeObjects(p.ExtraBody, o.ExtraBody)
	return p
}

func setPtr[T any](dst **T, src *T) {
	if src != nil {
		*dst = src
	}
}

// ForSample returns p for sample k of a prompt: with a seed, seed+k, so
// that every sample is different and reproducible.
func (p Params) ForSample(k int) Params {
	if p.Seed != nil && k != 0 {
		s := *p.Seed + int64(k)
		p.Seed = &s
	}
	return p
}

// mergeObjects merges two canonical JSON objects, b's keys winning. Either
// may be empty. Values that do not decode (never stored by aerie) leave a
// unchanged.
func mergeObjects(a, b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return a
	}
	maps.Copy(ma, mb)
	out, err := json.Marshal(ma) // map keys are sorted: canonical
	if err != nil {
		return a
	}
	return out
}

// CanonicalObject checks that raw is one JSON object and returns it
// compact with its keys sorted at every level and numbers written as
// given, so that equal objects have equal bytes (manifests and digests
// compare them).
func CanonicalObject(raw []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("must be a JSON object, found %s", jsonKind(v))
	}
	return json.Marshal(v)
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	default:
		return "an object"
	}
}

// Validate checks every parameter against the ranges vLLM accepts, so
// that a mistyped value is refused before anything is queued rather than
// dead-lettering every prompt with a 400.
func (p Params) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	finite := func(name string, v *float64) bool {
		if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
			bad("%s is %g: it must be a finite number", name, *v)
			return false
		}
		return v != nil
	}
	if p.MaxTokens < 0 {
		bad("max_tokens is %d: use a positive number, or 0 to let the backend fill the context window", p.MaxTokens)
	}
	if finite("temperature", p.Temperature) && *p.Temperature < 0 {
		bad("temperature is %g: it must be 0 or more", *p.Temperature)
	}
	if finite("top_p", p.TopP) && (*p.TopP <= 0 || *p.TopP > 1) {
		bad("top_p is %g: it must be more than 0 and at most 1", *p.TopP)
	}
	if p.TopK != nil && *p.TopK < -1 {
		bad("top_k is %d: use -1 or 0 to disable it, or at least 1", *p.TopK)
	}
	if finite("min_p", p.MinP) && (*p.MinP < 0 || *p.MinP > 1) {
		bad("min_p is %g: it must be between 0 and 1", *p.MinP)
	}
	if finite("presence_penalty", p.PresencePenalty) && (*p.PresencePenalty < -2 || *p.PresencePenalty > 2) {
		bad("presence_penalty is %g: it must be between -2 and 2", *p.PresencePenalty)
	}
	if finite("frequency_penalty", p.FrequencyPenalty) && (*p.FrequencyPenalty < -2 || *p.FrequencyPenalty > 2) {
		bad("frequency_penalty is %g: it must be between -2 and 2", *p.FrequencyPenalty)
	}
	if finite("repetition_penalty", p.RepetitionPenalty) && *p.RepetitionPenalty <= 0 {
		bad("repetition_penalty is %g: it must be more than 0 (1 means none)", *p.RepetitionPenalty)
	}
	for i, s := range p.Stop {
		if s == "" {
			bad("stop string %d is empty", i+1)
		}
	}
	switch p.ReasoningEffort {
	case "", "minimal", "low", "medium", "high":
	default:
		bad("reasoning_effort is %q: use minimal, low, medium or high", p.ReasoningEffort)
	}
	if len(p.ChatTemplateKwargs) > 0 {
		if _, err := CanonicalObject(p.ChatTemplateKwargs); err != nil {
			bad("chat_template_kwargs %v", err)
		}
	}
	if len(p.ExtraBody) > 0 {
		if err := checkExtraBody(p.ExtraBody); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkExtraBody(raw json.RawMessage) error {
	if _, err := CanonicalObject(raw); err != nil {
		return fmt.Errorf("extra body %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("extra body: %w", err)
	}
	for _, k := range ReservedBodyKeys {
		if _, ok := m[k]; ok {
			return fmt.Errorf("extra body sets %q, which aerie sets itself: %s", k, reservedHint(k))
		}
	}
	return nil
}

func reservedHint(key string) string {
	switch key {
	case "n":
		return "use --samples for several answers per prompt"
	case "return_token_ids":
		return "use --return-token-ids"
	case "model":
		return "use --model"
	default:
		return "remove it"
	}
}

// paramFields are the typed fields of Params by their request name;
// ParamsFromJSON puts every other key in ExtraBody.
var paramFields = map[string]func(p *Params, raw json.RawMessage) error{
	"max_tokens":            func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.MaxTokens) },
	"max_completion_tokens": func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.MaxTokens) },
	"temperature":           func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.Temperature) },
	"top_p":                 func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.TopP) },
	"top_k":                 func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.TopK) },
	"min_p":                 func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.MinP) },
	"presence_penalty":      func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.PresencePenalty) },
	"frequency_penalty":     func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.FrequencyPenalty) },
	"repetition_penalty":    func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.RepetitionPenalty) },
	"seed":                  func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.Seed) },
	"reasoning_effort":      func(p *Params, raw json.RawMessage) error { return json.Unmarshal(raw, &p.ReasoningEffort) },
	"stop": func(p *Params, raw json.RawMessage) error {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			p.Stop = []string{one}
			return nil
		}
		return json.Unmarshal(raw, &p.Stop)
	},
	"chat_template_kwargs": func(p *Params, raw json.RawMessage) error {
		obj, err := CanonicalObject(raw)
		p.ChatTemplateKwargs = obj
		return err
	},
}

// ParamsFromJSON reads a JSON object of request parameters, as an input
// line's "params" or an OpenAI Batch line's body carries them: the names
// and JSON types of the request body. Known names fill their fields
// (max_completion_tokens is max_tokens, stop may be one string); any
// other key goes to ExtraBody, to be sent as given. Keys aerie sets
// itself (ReservedBodyKeys) are refused, except "n": 1. The result is
// validated.
func ParamsFromJSON(raw []byte) (Params, error) {
	var p Params
	var fields map[string]json.RawMessage
	if len(bytes.TrimSpace(raw)) == 0 || bytes.TrimSpace(raw)[0] != '{' {
		return p, errors.New("params must be a JSON object of request parameters")
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return p, fmt.Errorf("params: %w", err)
	}
	extra := map[string]json.RawMessage{}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v := fields[k]
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue // null: not set
		}
		if k == "n" && bytes.Equal(bytes.TrimSpace(v), []byte("1")) {
			continue
		}
		if slices.Contains(ReservedBodyKeys, k) {
			return p, fmt.Errorf("params sets %q, which aerie sets itself: %s", k, reservedHint(k))
		}
		if set, ok := paramFields[k]; ok {
			if err := set(&p, v); err != nil {
				return p, fmt.Errorf("params.%s: %s", k, typeProblem(err))
			}
			continue
		}
		extra[k] = v
	}
	if len(extra) > 0 {
		b, err := json.Marshal(extra)
		if err != nil {
			return p, fmt.Errorf("params: %w", err)
		}
		if p.ExtraBody, err = CanonicalObject(b); err != nil {
			return p, fmt.Errorf("params: %w", err)
		}
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("params: %w", err)
	}
	return p, nil
}

// typeProblem turns a decoding error of one field into a short reason.
func typeProblem(err error) string {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Sprintf("expected %s, found a JSON %s", goTypeName(typ.Type.String()), typ.Value)
	}
	return err.Error()
}

func goTypeName(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch t {
	case "int", "int64":
		return "an integer"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "[]string":
		return "a string or a list of strings"
	}
	return t
}

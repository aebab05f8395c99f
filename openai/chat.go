package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"time"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is sent with an earlier assistant turn, for chat
	// templates that render the reasoning of earlier turns; empty is left
	// out.
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// ChatRequest is what is asked of the model. Zero or nil fields are left
// out of the request, so the server's defaults (often the model's
// generation config) apply.
type ChatRequest struct {
	// Model is the served model name; empty lets the server choose, which
	// only some servers allow.
	Model    string
	Messages []Message
	// MaxTokens caps the answer, reasoning included; 0 means the server's
	// limit (what is left of the context).
	MaxTokens   int
	Temperature *float64
	TopP        *float64
	// TopK, MinP, the penalties, Seed, Stop and ReasoningEffort are sent
	// under their request names (top_k, min_p, presence_penalty,
	// frequency_penalty, repetition_penalty, seed, stop,
	// reasoning_effort) when set.
	TopK              *int
	MinP              *float64
	PresencePenalty   *float64
	FrequencyPenalty  *float64
	RepetitionPenalty *float64
	Seed              *int64
	Stop              []string
	ReasoningEffort   string
	// ChatTemplateKwargs, a JSON object, is sent as chat_template_kwargs;
	// empty sends nothing, and anything but an object is refused
	// (Permanent) before the request is sent.
	ChatTemplateKwargs json.RawMessage
	// ReturnTokenIDs asks vLLM for the token ids of the prompt and the
	// answer (Completion.PromptTokenIDs and TokenIDs).
	ReturnTokenIDs bool
	// N asks for N answers to the one prompt (parallel sampling), sent
	// as n when above 1: the server reads the prompt once for all of
	// them. vLLM samples answer k with Seed+k when Seed is set. Their
	// answers are in Completion.Choices; a server that ignores n returns
	// fewer, which the caller must check.
	N int
	// Priority is the request's priority in vLLM's sense, sent as
	// priority when not 0: under --scheduling-policy priority a lower
	// value is served first and preempts higher ones; a vLLM without that
	// policy refuses any other value than 0 (400). The client's Dialect
	// maps it onto other engines' scales.
	Priority int
	// ExtraBody, a JSON object, is merged into the request body last: its
	// keys replace any the fields above produced (a null value sends
	// null). Empty adds nothing; anything but an object is refused
	// (Permanent) before the request is sent.
	ExtraBody json.RawMessage
}

// Usage is the server's token count for one request.
type Usage struct {
	PromptTokens int `json:"prompt_tokens"`
	// CompletionTokens counts the whole answer, reasoning included.
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Completion is a finished answer.
type Completion struct {
	ID    string
	Model string
	// Reasoning is the model's thinking, from whichever field or inline
	// <think> block the server used; empty if it had none.
	Reasoning string
	// Content is the answer proper, without any reasoning.
	Content string
	// FinishReason is "stop" for a complete answer and "length" when it
	// hit MaxTokens or the context length (truncated).
	FinishReason string
	// Usage is as reported by the server; zero if it sent none.
	Usage Usage
	// TTFT is the time from sending the request to the first chunk that
	// carried text (reasoning or content). It includes time queued on the
	// server. Zero if no text arrived. For Chat it is the time to the
	// response headers, which arrive with the whole answer.
	TTFT time.Duration
	// Latency is the time from sending the request to the end of the
	// response.
	Latency time.Duration
	// Chunks counts the stream's data chunks ([DONE] excluded); 0 for Chat.
	Chunks int
	// SystemFingerprint is the server's system_fingerprint: the first
	// non-empty one of the stream's chunks, or the one of a non-streaming
	// response; empty when the server sent none (vLLM does not). aerie's
	// simulator names itself here, so that its answers cannot pass for a
	// real model's.
	SystemFingerprint string
	// PromptTokenIDs and TokenIDs are the token ids of the prompt as the
	// server rendered it and of the answer, when the request asked for
	// them (ReturnTokenIDs) and the server sent them; nil otherwise.
	PromptTokenIDs []int
	TokenIDs       []int
	// Choices are, for a request with N above 1, its answers by index,
	// as many as the server sent (a server that ignores n sends one):
	// Choices[0] is the answer the fields above hold. Nil for a request
	// of one answer.
	Choices []Choice
}

// Choice is one of the answers of a request with N above 1.
type Choice struct {
	Reasoning, Content, FinishReason string
	// CompletionTokens is the answer's own token count: from the
	// server's running usage when it sends it per answer (vLLM does),
	// otherwise the chunks that carried its text; for a non-streaming
	// response, the length of TokenIDs when sent, otherwise 0.
	CompletionTokens int
	TokenIDs         []int
}

// MaxN bounds ChatRequest.N.
const MaxN = 256

// Progress is called by ChatStream from the goroutine reading the stream
// each time new tokens arrive, with how many the chunk carried. It must
// return quickly: the stream is not read while it runs.
//
// Token counts come from the server's running usage figures when it sends
// them (continuous usage stats); otherwise each chunk carrying text
// counts as one token, and the final usage chunk adds the difference, so
// the calls add up to Usage.CompletionTokens whenever the server reports
// usage.
type Progress func(tokens int)

// chatBody is the wire form of a chat completion request.
type chatBody struct {
	Model              string          `json:"model,omitempty"`
	Messages           []Message       `json:"messages"`
	MaxTokens          int             `json:"max_tokens,omitempty"`
	Temperature        *float64        `json:"temperature,omitempty"`
	TopP               *float64        `json:"top_p,omitempty"`
	TopK               *int            `json:"top_k,omitempty"`
	MinP               *float64        `json:"min_p,omitempty"`
	PresencePenalty    *float64        `json:"presence_penalty,omitempty"`
	FrequencyPenalty   *float64        `json:"frequency_penalty,omitempty"`
	RepetitionPenalty  *float64        `json:"repetition_penalty,omitempty"`
	Seed               *int64          `json:"seed,omitempty"`
	Stop               []string        `json:"stop,omitempty"`
	ReasoningEffort    string          `json:"reasoning_effort,omitempty"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs,omitempty"`
	ReturnTokenIDs     bool            `json:"return_token_ids,omitempty"`
	N                  int             `json:"n,omitempty"`
	Priority           json.RawMessage `json:"priority,omitempty"`
	Stream             bool            `json:"stream,omitempty"`
	StreamOptions      *streamOptions  `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats asks vLLM and SGLang for running usage in
	// every chunk, which gives exact token progress.
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// encode validates req and renders the request body.
func (req *ChatRequest) encode(stream bool, d Dialect) ([]byte, error) {
	if len(req.Messages) == 0 {
		return nil, fmt.Errorf("%w: no messages", errInvalidRequest)
	}
	if req.MaxTokens < 0 {
		return nil, fmt.Errorf("%w: negative max tokens %d", errInvalidRequest, req.MaxTokens)
	}
	if req.N < 0 || req.N > MaxN {
		return nil, fmt.Errorf("%w: n %d is not between 1 and %d", errInvalidRequest, req.N, MaxN)
	}
	if err := checkObject("chat template kwargs", req.ChatTemplateKwargs); err != nil {
		return nil, err
	}
	if err := checkObject("extra body", req.ExtraBody); err != nil {
		return nil, err
	}
	body := chatBody{
		Model:              req.Model,
		Messages:           req.Messages,
		MaxTokens:          req.MaxTokens,
		Temperature:        req.Temperature,
		TopP:               req.TopP,
		TopK:               req.TopK,
		MinP:               req.MinP,
		PresencePenalty:    req.PresencePenalty,
		FrequencyPenalty:   req.FrequencyPenalty,
		RepetitionPenalty:  req.RepetitionPenalty,
		Seed:               req.Seed,
		Stop:               req.Stop,
		ReasoningEffort:    req.ReasoningEffort,
		ChatTemplateKwargs: req.ChatTemplateKwargs,
		ReturnTokenIDs:     req.ReturnTokenIDs,
		Priority:           d.Priority.Encode(req.Priority),
	}
	if req.N > 1 {
		body.N = req.N
	}
	if stream {
		body.Stream = true
		body.StreamOptions = &streamOptions{IncludeUsage: true, ContinuousUsageStats: true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		// Only NaN or infinite sampling parameters get here.
		return nil, fmt.Errorf("%w: %w", errInvalidRequest, err)
	}
	if len(req.ExtraBody) == 0 {
		return b, nil
	}
	return mergeExtraBody(b, req.ExtraBody)
}

// checkObject reports an error unless raw is empty (not sent) or one
// JSON object.
func checkObject(what string, raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(raw) {
		return fmt.Errorf("%w: %s must be a JSON object, got %s", errInvalidRequest, what, truncate(string(raw), 80))
	}
	return nil
}

// mergeExtraBody returns the request body b with the keys of the JSON
// object extra added, replacing those b already has. Both must be JSON
// objects.
func mergeExtraBody(b []byte, extra json.RawMessage) ([]byte, error) {
	var fields, add map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidRequest, err)
	}
	if err := json.Unmarshal(extra, &add); err != nil {
		return nil, fmt.Errorf("%w: extra body: %w", errInvalidRequest, err)
	}
	maps.Copy(fields, add)
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("%w: extra body: %w", errInvalidRequest, err)
	}
	return out, nil
}

// Chat runs a non-streaming chat completion. It is for short requests and
// for servers that cannot stream; ChatStream reports progress and TTFT.
// The server sends nothing until the whole answer is ready, so
// Config.FirstTokenTimeout bounds the generation, Config.IdleTimeout the
// gaps while the body is read, and Config.RequestTimeout (if set) the
// whole; expiry of any is Transient. The end of ctx is Canceled.
func (c *Client) Chat(ctx context.Context, req ChatRequest) (*Completion, error) {
	k := c.startChat(ctx)
	k.n = req.N
	defer k.finish()
	body, err := req.encode(false, c.dialect)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.where, err)
	}
	begin := time.Now()
	resp, err := k.send(http.MethodPost, c.ep.chat, body)
	if err != nil {
		return nil, err
	}
	k.dog.admit(afterHeaders)
	defer k.release(resp.Body, true)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s: %w", k.where, readAPIError(resp, c.keys.secrets()))
	}
	ttft := time.Since(begin)
	return k.readWhole(resp, begin, ttft)
}

// readWhole reads a complete (non-streaming) chat completion response.
func (k *call) readWhole(resp *http.Response, begin time.Time, ttft time.Duration) (*Completion, error) {
	raw, err := readBounded(resp.Body, maxResponseBody)
	if err != nil {
		return nil, k.fail("reading response", err)
	}
	latency := time.Since(begin)
	var r wholeResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", k.where, errMalformed, err)
	}
	if obj := r.errorFrom(); obj != nil {
		// The server accepted the request and failed after: InStream.
		return nil, fmt.Errorf("%s: %w", k.where, apiErrorFrom(resp.StatusCode, obj, k.c.keys.secrets()))
	}
	var choice *wholeChoice
	for i := range r.Choices {
		if r.Choices[i].Index == 0 {
			choice = &r.Choices[i]
			break
		}
	}
	if choice == nil {
		return nil, fmt.Errorf("%s: %w: no choices", k.where, errMalformed)
	}
	if choice.FinishReason == "" {
		return nil, fmt.Errorf("%s: %w: no finish_reason", k.where, errMalformed)
	}
	var a answer
	m := choice.Message
	a.add(m.Reasoning, m.ReasoningContent, m.Content)
	reasoning, content := a.split()
	comp := &Completion{
		ID:                r.ID,
		Model:             r.Model,
		Reasoning:         reasoning,
		Content:           content,
		FinishReason:      choice.FinishReason,
		TTFT:              ttft,
		Latency:           latency,
		SystemFingerprint: r.SystemFingerprint,
		PromptTokenIDs:    r.PromptTokenIDs,
		TokenIDs:          choice.TokenIDs,
	}
	if comp.PromptTokenIDs == nil {
		comp.PromptTokenIDs = choice.PromptTokenIDs
	}
	if r.Usage != nil {
		comp.Usage = *r.Usage
	}
	if k.n > 1 {
		if comp.Choices, err = wholeChoices(r.Choices); err != nil {
			return nil, fmt.Errorf("%s: %w", k.where, err)
		}
	}
	return comp, nil
}

// wholeChoices are the answers of a non-streaming response to a request
// of several, by index: each index once, from 0 on without a gap.
func wholeChoices(cs []wholeChoice) ([]Choice, error) {
	out := make([]Choice, len(cs))
	seen := make([]bool, len(cs))
	for _, c := range cs {
		if c.Index < 0 || c.Index >= len(cs) || seen[c.Index] {
			return nil, fmt.Errorf("%w: choice index %d of %d choices", errMalformed, c.Index, len(cs))
		}
		if c.FinishReason == "" {
			return nil, fmt.Errorf("%w: choice %d has no finish_reason", errMalformed, c.Index)
		}
		seen[c.Index] = true
		var a answer
		a.add(c.Message.Reasoning, c.Message.ReasoningContent, c.Message.Content)
		r, t := a.split()
		out[c.Index] = Choice{Reasoning: r, Content: t, FinishReason: c.FinishReason, CompletionTokens: len(c.TokenIDs), TokenIDs: c.TokenIDs}
	}
	return out, nil
}

// wholeResponse is a non-streaming chat completion, or an error object
// that a server sent with a 2xx status (an *APIError whose InStream is
// true: the server failed after accepting the request).
type wholeResponse struct {
	ID                string        `json:"id"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []wholeChoice `json:"choices"`
	Usage             *Usage        `json:"usage"`
	// PromptTokenIDs is vLLM's prompt_token_ids, sent when the request
	// had return_token_ids; nil otherwise.
	PromptTokenIDs []int `json:"prompt_token_ids"`
	errorEnvelope
}

type wholeChoice struct {
	Index        int       `json:"index"`
	Message      textParts `json:"message"`
	FinishReason string    `json:"finish_reason"`
	// TokenIDs is vLLM's token_ids of the answer, as PromptTokenIDs.
	TokenIDs []int `json:"token_ids"`
	// PromptTokenIDs is where SGLang puts the prompt's ids: on each
	// choice rather than beside them.
	PromptTokenIDs []int `json:"prompt_token_ids"`
}

// textParts holds the text fields of a message or a delta. Reasoning is
// vLLM's field, ReasoningContent SGLang's (and older vLLM's).
type textParts struct {
	Content          string `json:"content"`
	Reasoning        string `json:"reasoning"`
	ReasoningContent string `json:"reasoning_content"`
}

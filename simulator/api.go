package simulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Message is one chat turn. Content sent as an array of parts (the
// OpenAI multi-part form) is read as its text parts joined by newlines;
// other part types are ignored.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is the reasoning of an earlier assistant turn,
	// sent back for chat templates that render it. The simulator renders
	// it: it counts toward the prompt's tokens and changes the answer.
	// A message may carry it as reasoning_content or, as newer vLLM
	// accepts, reasoning; empty means none, and leaves the prompt as it
	// was without the field.
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// UnmarshalJSON accepts content as a string, null, or an array of parts.
func (m *Message) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		Reasoning        *string         `json:"reasoning"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	m.Role, m.Content, m.ReasoningContent = raw.Role, "", ""
	switch {
	case raw.ReasoningContent != nil && *raw.ReasoningContent != "":
		m.ReasoningContent = *raw.ReasoningContent
	case raw.Reasoning != nil:
		m.ReasoningContent = *raw.Reasoning
	}
	c := bytes.TrimSpace(raw.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
		return nil
	case c[0] == '"':
		return json.Unmarshal(c, &m.Content)
	case c[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return err
		}
		texts := make([]string, 0, len(parts))
		for _, p := range parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		m.Content = strings.Join(texts, "\n")
		return nil
	}
	return errors.New("message content must be a string or an array of parts")
}

// chatRequest is the part of a chat completion request the simulator
// reads; other fields are accepted and ignored, as vLLM ignores (and
// logs) fields it does not know. Null means not given. Fields whose
// JSON type vLLM checks beyond what decoding does are kept raw and
// checked in parseSampling.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	ReasoningEffort     *string         `json:"reasoning_effort"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	ReturnTokenIDs      *bool           `json:"return_token_ids"`
	// Priority is the request's priority, read by the dialect
	// (dialect.queueKey): vLLM's integer, lower first, refused other than
	// 0 without --scheduling-policy priority; SGLang's integer, higher
	// first; TensorRT-LLM's number in [0, 1], higher first.
	Priority json.RawMessage `json:"priority"`
	// N is how many answers to sample (parallel sampling); nil means 1.
	N             *int           `json:"n"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func makeUsage(prompt, completion int) *usage {
	return &usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// completion is a non-streaming response. SystemFingerprint is always
// schema.SimulatedFingerprint, so that an answer of the simulator
// cannot pass for a real model's.
type completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage"`
	// PromptTokenIDs is sent when the request had return_token_ids.
	PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
}

type completionChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	Logprobs     *struct{}       `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
	// PromptTokenIDs is where SGLang puts the prompt's ids.
	PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
	// TokenIDs is sent when the request had return_token_ids: one id per
	// completion token.
	TokenIDs []int `json:"token_ids,omitempty"`
}

// responseMessage carries the reasoning in whichever field the config
// names; content is null when the answer had none (cut short while still
// reasoning).
type responseMessage struct {
	Role             string  `json:"role"`
	Content          *string `json:"content"`
	Reasoning        *string `json:"reasoning,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// chunk is one server-sent event of a streaming response; every chunk
// carries SystemFingerprint, as completion does.
type chunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *usage        `json:"usage,omitempty"`
	// PromptTokenIDs is sent on the first chunk when the request had
	// return_token_ids.
	PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        delta     `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	// TokenIDs are the ids of the tokens this chunk adds, when the
	// request had return_token_ids.
	TokenIDs []int `json:"token_ids,omitempty"`
}

type delta struct {
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
	Reasoning        *string `json:"reasoning,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// setReasoning puts text in the field named by the config.
func setReasoning(field string, text string, reasoning, reasoningContent **string) {
	if field == ReasoningFieldReasoningContent {
		*reasoningContent = &text
		return
	}
	*reasoning = &text
}

// modelList is the body of GET /v1/models.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root"`
	MaxModelLen int    `json:"max_model_len"`
}

// apiError is vLLM's error body.
type apiError struct {
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// Error types vLLM uses for the statuses the simulator returns.
var errorTypes = map[int]string{
	http.StatusBadRequest:          "BadRequestError",
	http.StatusNotFound:            "NotFoundError",
	http.StatusTooManyRequests:     "RateLimitError",
	http.StatusInternalServerError: "InternalServerError",
	http.StatusServiceUnavailable:  "ServiceUnavailableError",
}

// writeError sends an error body with status; param names the offending
// request field, or is empty.
func writeError(w http.ResponseWriter, status int, param, message string) {
	info := errorInfo{Message: message, Type: errorTypes[status], Code: status}
	if info.Type == "" {
		info.Type = http.StatusText(status)
	}
	if param != "" {
		info.Param = &param
	}
	writeJSON(w, status, apiError{Error: info})
}

// writeJSON sends v with status, compact and without a final newline,
// as vLLM's JSON responses are. Encoding these fixed types cannot fail;
// a write error means the client left, which the handler cannot report.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // keep <think> readable, as Python's json does
	if err := enc.Encode(v); err != nil {
		http.Error(w, "simulator: encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(bytes.TrimSuffix(body.Bytes(), []byte("\n")))
}

// streamErrorData is the data of vLLM's in-stream error event for an
// error of status: {"error": {"message", "type", "param", "code"}} laid
// out as Python's json.dumps lays it out (a space after each colon and
// comma), since vLLM's create_streaming_error_response builds it with
// json.dumps rather than pydantic (vllm/entrypoints/openai/engine/
// serving.py, OpenAIServing.create_streaming_error_response, called
// from chat_completion_stream_generator in vllm/entrypoints/openai/
// chat_completion/serving.py when generation raises after the stream
// began). The messages given are ASCII, so Python's escaping of other
// characters does not arise.
func streamErrorData(status int, message string) []byte {
	var msg bytes.Buffer
	enc := json.NewEncoder(&msg)
	enc.SetEscapeHTML(false)
	// A string always encodes.
	_ = enc.Encode(message)
	return fmt.Appendf(nil, `{"error": {"message": %s, "type": %q, "param": null, "code": %d}}`,
		bytes.TrimSuffix(msg.Bytes(), []byte("\n")), errorTypes[status], status)
}

package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// maxBodyBytes bounds a request body: a full 262,144-token context is
// about 1 MB of text, so this leaves ample room for JSON overhead.
const maxBodyBytes = 64 << 20

// requestError is a rejected request: the status and body to send.
type requestError struct {
	status  int
	param   string
	message string
}

func badRequest(param, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, param: param, message: fmt.Sprintf(format, args...)}
}

// job is an accepted request.
type job struct {
	req       chatRequest
	prompt    int // prompt tokens
	maxTokens int // completion limit after defaults
	id        string
	created   int64
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	j, rerr := s.parseChat(w, r)
	if rerr != nil {
		writeError(w, rerr.status, rerr.param, rerr.message)
		return
	}
	seq := newSequence(j.prompt, s.cfg.plan(j.req.Messages, j.maxTokens))
	if err := s.eng.submit(seq); err != nil {
		writeError(w, http.StatusServiceUnavailable, "", "The engine is not running.")
		return
	}
	if j.req.Stream {
		s.stream(w, r, j, seq)
		return
	}
	s.complete(w, r, j, seq)
}

// parseChat decodes and checks a request the way vLLM does, in the same
// order: model, then messages and options, then the context length.
func (s *Server) parseChat(w http.ResponseWriter, r *http.Request) (*job, *requestError) {
	var req chatRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, badRequest("", "Request body is larger than %d bytes.", tooBig.Limit)
		}
		return nil, badRequest("", "Invalid JSON in request body: %v", err)
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		return nil, &requestError{
			status:  http.StatusNotFound,
			param:   "model",
			message: fmt.Sprintf("The model `%s` does not exist.", req.Model),
		}
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must contain at least one message.")
	}
	if req.StreamOptions != nil && !req.Stream {
		return nil, badRequest("stream_options", "Stream options can only be defined when `stream=True`.")
	}
	if t := req.Temperature; t != nil && *t < 0 {
		return nil, badRequest("temperature", "temperature must be non-negative, got %v.", *t)
	}
	if p := req.TopP; p != nil && (*p <= 0 || *p > 1) {
		return nil, badRequest("top_p", "top_p must be in (0, 1], got %v.", *p)
	}

	j := &job{req: req, prompt: promptTokens(req.Messages), created: time.Now().Unix()}
	limit := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		limit = req.MaxCompletionTokens // newer name wins, as in vLLM
	}
	maxLen := s.cfg.MaxModelLen
	switch {
	case limit != nil && *limit < 1:
		return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d.", *limit)
	case limit != nil && j.prompt+*limit > maxLen:
		return nil, badRequest("", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, j.prompt+*limit, j.prompt, *limit)
	case limit == nil && j.prompt >= maxLen:
		return nil, badRequest("", "This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
			maxLen, j.prompt)
	case limit != nil:
		j.maxTokens = *limit
	default:
		j.maxTokens = maxLen - j.prompt
	}
	j.id = fmt.Sprintf("chatcmpl-%016x%016x", rand.Uint64(), rand.Uint64())
	return j, nil
}

// complete answers a non-streaming request once the sequence is done.
// A client that leaves first frees its slot or queue place at once.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, j *job, seq *sequence) {
	select {
	case <-seq.done:
	case <-r.Context().Done():
		s.eng.cancel(seq)
		return
	}
	if seq.err != nil {
		writeError(w, http.StatusServiceUnavailable, "", "The engine stopped before the request finished.")
		return
	}
	a := seq.answer
	inline := s.cfg.ReasoningField == ReasoningFieldThink
	msg := responseMessage{Role: "assistant"}
	reasoning := appendReasoning(nil, a, 0, a.tokens, inline)
	content := appendContent(nil, a, 0, a.tokens, inline)
	if inline {
		content = append(reasoning, content...)
	} else if len(reasoning) > 0 {
		setReasoning(s.cfg.ReasoningField, string(reasoning), &msg.Reasoning, &msg.ReasoningContent)
	}
	if len(content) > 0 {
		text := string(content)
		msg.Content = &text
	}
	writeJSON(w, http.StatusOK, completion{
		ID:      j.id,
		Object:  "chat.completion",
		Created: j.created,
		Model:   s.cfg.Model,
		Choices: []completionChoice{{Message: msg, FinishReason: a.finishReason}},
		Usage:   makeUsage(j.prompt, a.tokens),
	})
}

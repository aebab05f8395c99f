package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// maxN bounds a request's n: the simulator runs one sequence per
// answer, and a client asking for thousands is a mistake.
const maxN = 256

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
	prompt    int  // prompt tokens
	limit     *int // completion limit as requested; nil if none
	maxTokens int  // completion limit after defaults
	id        string
	created   int64
	model     string // the served model's name when the request came
	sampling  sampling
	key       uint64 // requestKey: the request's deterministic identity
	// priority is the request's queue key, lower first (dialect.queueKey).
	priority int

	// outage is closed once an outage is on; the request is then cut.
	outage <-chan struct{}
	// cut is faultDisconnect or faultStreamError for an answer to be
	// cut part way, faultNone otherwise; cutAt is then how many tokens
	// are sent before the cut (-1 when there is none).
	cut   faultKind
	cutAt int
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	outage := s.outages.watch()
	j, rerr := s.parseChat(w, r)
	if rerr != nil {
		writeError(w, rerr.status, rerr.param, rerr.message)
		return
	}
	j.outage, j.cutAt = outage, -1
	plan := s.injector.plan(j.key)
	if plan.slow && !s.delayFirstByte(w, r, outage) {
		return
	}
	switch plan.kind {
	case fault429, fault500, fault503:
		s.replyStatus(w, plan.kind)
		return
	case fault400:
		s.replyContextLength(w, j)
		return
	case faultHang:
		s.hang(w, r, outage)
		return
	}
	if s.cfg.MaxQueued > 0 && s.eng.queued() >= s.cfg.MaxQueued {
		writeError(w, http.StatusServiceUnavailable, "", "The request queue is full.")
		return
	}
	seqs := s.children(j)
	if plan.cutsAnswer() {
		j.cut, j.cutAt = plan.kind, plan.cutAfter(seqs[0].answer.tokens)
	}
	for i, seq := range seqs {
		if err := s.eng.submit(seq); err != nil {
			for _, q := range seqs[:i] {
				s.eng.cancel(q)
			}
			writeError(w, http.StatusServiceUnavailable, "", "The engine is not running.")
			return
		}
	}
	if j.req.Stream {
		s.stream(w, r, j, seqs)
		return
	}
	s.complete(w, r, j, seqs)
}

// cancelAll ends the sequences of one request.
func (s *Server) cancelAll(seqs []*sequence) {
	for _, q := range seqs {
		s.eng.cancel(q)
	}
}

// children are the sequences of j: one per answer asked for (n), each
// sampled as vLLM samples the children of a parallel sampling request,
// with the request's seed plus its index when the request has a seed.
// They share the prompt, which the prefix cache reads once.
func (s *Server) children(j *job) []*sequence {
	n := 1
	if j.req.N != nil {
		n = *j.req.N
	}
	prefix := mix64(promptHash(j.req.Messages, s.cfg.Seed) | 1)
	seqs := make([]*sequence, n)
	for k := range seqs {
		sp, key := j.sampling, j.key
		if k > 0 && j.req.Seed != nil {
			req := j.req
			seed := *req.Seed + int64(k)
			req.Seed = &seed
			// The request parsed once already: only the seed differs.
			child, _ := parseSampling(&req)
			sp, key = child, s.cfg.requestKey(req.Messages, &child)
		}
		seq := newSequence(j.prompt, s.cfg.planAnswer(sp.answerHash(key), &sp, j.maxTokens))
		seq.prefix = prefix
		seq.priority = j.priority
		seqs[k] = seq
	}
	return seqs
}

// contextLengthError is vLLM's refusal of a prompt of prompt tokens
// with completion limit (nil if none was given) that does not fit in
// maxLen tokens.
func contextLengthError(maxLen, prompt int, limit *int) *requestError {
	if limit != nil {
		return badRequest("", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, prompt+*limit, prompt, *limit)
	}
	return badRequest("", "This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
		maxLen, prompt)
}

// parseChat decodes and checks a request the way vLLM does, in the same
// order: model, then messages and options, then the context length.
func (s *Server) parseChat(w http.ResponseWriter, r *http.Request) (*job, *requestError) {
	var req chatRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, badRequest("", "Request body is larger than %d bytes.", tooBig.Limit)
		}
		var wrongType *json.UnmarshalTypeError
		if errors.As(err, &wrongType) && wrongType.Field != "" {
			return nil, badRequest(wrongType.Field, "%s: expected %s, got %s.",
				wrongType.Field, jsonTypeName(wrongType.Type.Kind()), wrongType.Value)
		}
		return nil, badRequest("", "Invalid JSON in request body: %v", err)
	}
	if bad := s.dialect.unknownFields(body); len(bad) > 0 {
		return nil, extraForbidden(bad)
	}
	model := s.model.get()
	if req.Model != "" && req.Model != model {
		s.counts.add(faultModelNotFound)
		return nil, modelNotFound(req.Model)
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must contain at least one message.")
	}
	if req.StreamOptions != nil && !req.Stream {
		return nil, badRequest("stream_options", "Stream options can only be defined when `stream=True`.")
	}
	switch returnIDs := req.ReturnTokenIDs != nil && *req.ReturnTokenIDs; {
	case returnIDs && req.Stream && s.dialect.tokenIDs == idsUnstreamed:
		return nil, badRequest("", "return_token_ids is not supported with streaming on /v1/chat/completions. Please set stream=false when using return_token_ids=true.")
	case s.dialect.tokenIDs == idsNone:
		req.ReturnTokenIDs = nil // not a field of this engine's chat: ignored
	}
	sp, rerr := parseSampling(&req)
	if rerr != nil {
		return nil, rerr
	}
	if req.N != nil && (*req.N < 1 || *req.N > maxN) {
		return nil, badRequest("n", "n must be between 1 and %d, got %d.", maxN, *req.N)
	}
	if req.N != nil && *req.N > 1 && s.dialect.oneAnswer {
		// llama.cpp throws a runtime_error while reading the request,
		// which its server answers as a 500 server_error.
		return nil, &requestError{status: http.StatusInternalServerError, message: "Only one completion choice is allowed"}
	}
	priority, rerr := s.dialect.queueKey(req.Priority, s.cfg.SchedulingPolicy == SchedulingPriority, s.cfg.LowPriorityFirst)
	if rerr != nil {
		return nil, rerr
	}

	j := &job{req: req, prompt: promptTokens(req.Messages), created: time.Now().Unix(), model: model, sampling: sp, priority: priority}
	j.key = s.cfg.requestKey(req.Messages, &j.sampling)
	j.limit = req.MaxTokens
	if req.MaxCompletionTokens != nil {
		j.limit = req.MaxCompletionTokens // newer name wins, as in vLLM
	}
	maxLen := s.cfg.MaxModelLen
	switch limit := j.limit; {
	case limit != nil && *limit < 1:
		return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d.", *limit)
	case limit != nil && j.prompt+*limit > maxLen, limit == nil && j.prompt >= maxLen:
		return nil, contextLengthError(maxLen, j.prompt, limit)
	case limit != nil:
		j.maxTokens = *limit
	default:
		j.maxTokens = maxLen - j.prompt
	}
	j.id = fmt.Sprintf("chatcmpl-%016x%016x", rand.Uint64(), rand.Uint64())
	return j, nil
}

// complete answers a non-streaming request once its sequences are
// done. A client that leaves first frees their slots or queue places at
// once. An injected disconnect or stream error ends the request once the
// first answer has reached its cut (see failPartWay).
func (s *Server) complete(w http.ResponseWriter, r *http.Request, j *job, seqs []*sequence) {
	seq := seqs[0]
	var progress <-chan struct{}
	if j.cutAt >= 0 {
		progress = seq.notify
	}
	for _, q := range seqs {
		for waiting := true; waiting; {
			select {
			case <-q.done:
				waiting = false
			case <-progress:
				if int(seq.tokens.Load()) >= j.cutAt {
					s.cancelAll(seqs)
					s.failPartWay(w, j, seq)
					return
				}
			case <-r.Context().Done():
				s.cancelAll(seqs)
				s.left(j.outage)
				return
			case <-j.outage:
				s.cancelAll(seqs)
				s.cut(w, false)
				return
			}
		}
		if q.err != nil {
			s.cancelAll(seqs)
			writeError(w, http.StatusServiceUnavailable, "", "The engine stopped before the request finished.")
			return
		}
	}
	if j.cutAt >= 0 {
		s.failPartWay(w, j, seq)
		return
	}
	resp := completion{
		ID:                j.id,
		Object:            "chat.completion",
		Created:           j.created,
		Model:             j.model,
		SystemFingerprint: schema.SimulatedFingerprint,
		Choices:           make([]completionChoice, 0, len(seqs)),
	}
	var promptIDs []int
	if j.sampling.tokenIDs {
		promptIDs = promptTokenIDs(j.req.Messages)
		if s.dialect.tokenIDs != idsUnstreamed {
			resp.PromptTokenIDs = promptIDs
		}
	}
	total := 0
	inline := s.cfg.ReasoningField == ReasoningFieldThink
	for k, q := range seqs {
		a := q.answer
		total += a.tokens
		msg := responseMessage{Role: "assistant"}
		reasoning := appendReasoning(nil, a, 0, a.tokens, inline)
		content := appendContent(nil, a, 0, a.tokens, inline)
		if inline {
			content = append(reasoning, content...)
		} else if len(reasoning) > 0 {
			setReasoning(s.cfg.ReasoningField, string(reasoning), &msg.Reasoning, &msg.ReasoningContent)
		}
		// Content is null only when no content token was generated; a
		// stop string at its very start leaves it empty.
		if len(content) > 0 || a.tokens > a.reasoning {
			text := string(content)
			msg.Content = &text
		}
		c := completionChoice{Index: k, Message: msg, FinishReason: a.finishReason}
		if j.sampling.tokenIDs {
			c.TokenIDs = appendTokenIDs(make([]int, 0, a.tokens), a, 0, a.tokens)
			if s.dialect.tokenIDs == idsUnstreamed {
				c.PromptTokenIDs = promptIDs
			}
		}
		resp.Choices = append(resp.Choices, c)
	}
	// Usage counts the prompt once and the tokens of every answer, as
	// vLLM's.
	resp.Usage = makeUsage(j.prompt, total)
	writeJSON(w, http.StatusOK, resp)
}

// jsonTypeName names a Go kind as the JSON type a request field wants.
func jsonTypeName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	default:
		return "an object"
	}
}

// failPartWay ends a non-streaming request whose answer reached its
// injected cut: a disconnect closes the connection unanswered, a stream
// error answers 500 as vLLM does when generation fails before the
// response began.
func (s *Server) failPartWay(w http.ResponseWriter, j *job, seq *sequence) {
	if j.cut == faultDisconnect {
		s.disconnect(seq)
	}
	s.eng.cancel(seq)
	s.counts.add(faultStreamError)
	writeError(w, http.StatusInternalServerError, "", engineFailedMessage)
}

// disconnect cuts the connection of a request with an injected
// disconnect, freeing its slot.
func (s *Server) disconnect(seq *sequence) {
	s.eng.cancel(seq)
	s.counts.add(faultDisconnect)
	abortConnection()
}

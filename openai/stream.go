package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"
)

// ChatStream runs a streaming chat completion and returns the assembled
// answer once the server has sent [DONE].
//
// It asks for usage in every chunk (continuous usage stats) and in a final
// chunk, calls progress (which may be nil) as tokens arrive, and measures
// TTFT and latency. The request is bounded by the client's time limits
// (Config.FirstTokenTimeout until the first data event,
// Config.IdleTimeout between bytes after it, Config.RequestTimeout
// overall if set) as well as ctx; expiry of a limit is Transient, the end
// of ctx Canceled.
//
// A stream that stops before [DONE], or without a finish reason, is an
// error (Transient), as is a chunk that is not valid JSON. An error object
// sent inside the stream is returned as an *APIError with Status 0 whose
// InStream is true; it is Transient whatever its code, because vLLM sends
// one (code 400 by default) whenever generation fails after the stream
// has started. On error the Completion is nil: a partial answer is not
// training data.
//
// On a server whose Dialect says so, a request of several answers goes
// as several requests, and a request for token ids goes unstreamed (see
// Dialect).
func (c *Client) ChatStream(ctx context.Context, req ChatRequest, progress Progress) (*Completion, error) {
	switch {
	case req.N > 1 && c.dialect.SamplesAsRequests:
		return c.samplesAsRequests(ctx, req, progress)
	case req.ReturnTokenIDs && c.dialect.TokenIDsUnstreamed:
		comp, err := c.Chat(ctx, req)
		if err == nil && progress != nil && comp.Usage.CompletionTokens > 0 {
			progress(comp.Usage.CompletionTokens)
		}
		return comp, err
	}
	k := c.startChat(ctx)
	k.n = req.N
	defer k.finish()
	body, err := req.encode(true, c.dialect)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.where, err)
	}
	begin := time.Now()
	resp, err := k.send(http.MethodPost, c.ep.chat, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		k.dog.admit(afterHeaders)
		defer k.release(resp.Body, true)
		return nil, fmt.Errorf("%s: %w", k.where, readAPIError(resp, c.keys.secrets()))
	}
	if isJSON(resp.Header.Get("Content-Type")) {
		// The server (or a proxy) ignored "stream": the whole answer is
		// here, and its headers were the first token.
		k.dog.admit(afterHeaders)
		defer k.release(resp.Body, true)
		comp, err := k.readWhole(resp, begin, time.Since(begin))
		if err == nil && progress != nil && comp.Usage.CompletionTokens > 0 {
			progress(comp.Usage.CompletionTokens)
		}
		return comp, err
	}
	complete := false
	defer func() { k.release(resp.Body, complete) }()
	s := &streamState{begin: begin, progress: progress, secrets: c.keys.secrets()}
	if req.N > 1 {
		s.more = make([]choiceState, req.N)
	}
	if err := k.readStream(resp.Body, s); err != nil {
		return nil, err
	}
	complete = true
	return s.completion(), nil
}

// readStream feeds every chunk of the stream to s until [DONE]. The
// first data event (or [DONE]) is the first token for the watchdog.
func (k *call) readStream(body io.Reader, s *streamState) error {
	events := newSSEReader(body)
	defer events.release()
	for {
		data, done, err := events.next()
		if err == nil {
			k.dog.admit(afterFirstToken)
		}
		if done {
			break
		}
		if errors.Is(err, io.EOF) {
			return k.fail("", fmt.Errorf("%w after %d chunks (no [DONE])", errStreamEnded, s.chunks))
		}
		if err != nil {
			return k.fail(fmt.Sprintf("reading stream after %d chunks", s.chunks), err)
		}
		if err := s.event(data); err != nil {
			return fmt.Errorf("%s: %w", k.where, err)
		}
	}
	s.latency = time.Since(s.begin)
	if s.more != nil {
		return s.checkChoices(k.where)
	}
	if s.finishReason == "" {
		return fmt.Errorf("%s: %w after %d chunks (no finish_reason)", k.where, errStreamEnded, s.chunks)
	}
	return nil
}

// streamState accumulates a streamed answer.
type streamState struct {
	begin    time.Time
	progress Progress
	secrets  []string // API keys, removed from anything of the stream put in an error

	answer       answer
	id, model    string
	fingerprint  string
	finishReason string
	usage        Usage
	chunks       int
	counted      int // tokens reported to progress so far
	ttft         time.Duration
	latency      time.Duration
	// promptTokenIDs and tokenIDs are vLLM's token ids: the prompt's from
	// the first chunk that has them, the answer's concatenated over the
	// chunks; nil unless the server sent them.
	promptTokenIDs []int
	tokenIDs       []int
	// more holds, for a request of several answers (N above 1), each
	// answer by index; nil for one answer, which the fields above hold.
	more []choiceState
	// dec decodes the chunks.
	dec chunkDecoder
}

// streamChunk is one data chunk of a chat completion stream, or an error
// object sent in its place.
type streamChunk struct {
	ID                string         `json:"id"`
	Model             string         `json:"model"`
	SystemFingerprint string         `json:"system_fingerprint"`
	Choices           []streamChoice `json:"choices"`
	Usage             *Usage         `json:"usage"`
	// PromptTokenIDs comes with the first chunk when the request had
	// return_token_ids.
	PromptTokenIDs []int `json:"prompt_token_ids"`
	errorEnvelope
}

// streamChoice is one choice of a chunk.
type streamChoice struct {
	Index        int       `json:"index"`
	Delta        textParts `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
	// TokenIDs are the ids of this chunk's tokens (vLLM's
	// return_token_ids).
	TokenIDs []int `json:"token_ids"`
}

// event handles the data of one event. The data normally holds one JSON
// chunk; several, one after another (usually one per line), are accepted
// from servers that leave out the blank lines between events. Chunks are
// decoded by the stream's chunkDecoder; from the first it declines on,
// encoding/json decodes the rest, so the outcome is encoding/json's.
func (s *streamState) event(data []byte) error {
	rest := data
	for {
		rest = bytes.TrimLeft(rest, " \t\r\n")
		if len(rest) == 0 {
			return nil
		}
		if rest[0] != '{' {
			return s.decodeEvent(data, rest)
		}
		var chunk streamChunk
		n, ok := s.dec.decode(rest, &chunk)
		if !ok {
			return s.decodeEvent(data, rest)
		}
		rest = rest[n:]
		if err := s.take(&chunk); err != nil {
			return err
		}
	}
}

// decodeEvent handles the chunks in rest, the end of the event data,
// with encoding/json.
func (s *streamState) decodeEvent(data, rest []byte) error {
	dec := json.NewDecoder(bytes.NewReader(rest))
	for {
		var chunk streamChunk
		err := dec.Decode(&chunk)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			snippet := truncate(string(redact(data, s.secrets)), 200)
			return fmt.Errorf("%w: chunk %d is not valid JSON (%w): %s",
				errMalformed, s.chunks+1, err, snippet)
		}
		if err := s.take(&chunk); err != nil {
			return err
		}
	}
}

// take counts one decoded chunk and folds it into the state, or returns
// the error object it carries.
func (s *streamState) take(chunk *streamChunk) error {
	s.chunks++
	if obj := chunk.errorFrom(); obj != nil {
		return fmt.Errorf("after %d chunks: %w", s.chunks-1, apiErrorFrom(0, obj, s.secrets))
	}
	s.chunk(chunk)
	return nil
}

// chunk folds one decoded chunk into the state.
func (s *streamState) chunk(c *streamChunk) {
	if s.id == "" {
		s.id = c.ID
	}
	if s.model == "" {
		s.model = c.Model
	}
	if s.fingerprint == "" {
		s.fingerprint = c.SystemFingerprint
	}
	if s.promptTokenIDs == nil && c.PromptTokenIDs != nil {
		s.promptTokenIDs = c.PromptTokenIDs
	}
	if s.more != nil {
		s.chunkOfMany(c)
		return
	}
	text := false
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue // only one answer is asked for
		}
		d := ch.Delta
		if s.answer.add(d.Reasoning, d.ReasoningContent, d.Content) {
			text = true
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finishReason = *ch.FinishReason
		}
		if ch.TokenIDs != nil {
			if s.tokenIDs == nil {
				// The chunk's slice is its own (decoded afresh): keep it.
				s.tokenIDs = ch.TokenIDs
			} else {
				s.tokenIDs = append(s.tokenIDs, ch.TokenIDs...)
			}
		}
	}
	if text && s.ttft == 0 {
		s.ttft = max(time.Since(s.begin), 1)
	}
	tokens := 0
	if c.Usage != nil {
		s.usage = *c.Usage
		tokens = c.Usage.CompletionTokens - s.counted
	} else if text {
		tokens = 1
	}
	if tokens > 0 {
		s.counted += tokens
		if s.progress != nil {
			s.progress(tokens)
		}
	}
}

// completion returns the assembled answer.
func (s *streamState) completion() *Completion {
	reasoning, content := s.answer.split()
	comp := &Completion{
		ID:                s.id,
		Model:             s.model,
		Reasoning:         reasoning,
		Content:           content,
		FinishReason:      s.finishReason,
		Usage:             s.usage,
		TTFT:              s.ttft,
		Latency:           s.latency,
		Chunks:            s.chunks,
		SystemFingerprint: s.fingerprint,
		PromptTokenIDs:    s.promptTokenIDs,
		TokenIDs:          s.tokenIDs,
	}
	if s.more != nil {
		s.fillChoices(comp)
	}
	return comp
}

// isJSON reports whether a Content-Type is JSON rather than an event
// stream.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

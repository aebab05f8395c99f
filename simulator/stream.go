package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/aerie-dev/aerie/schema"
)

// streamer writes one answer of a streaming response as server-sent
// events: the response's only answer, or one of its n (index). Tokens
// that arrive together (at high Speed, many per engine tick) go out as
// one chunk, or two where the answer turns from reasoning to content, so
// the chunk count is bounded by wall time; usage figures stay exact.
type streamer struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	field   string // reasoning field
	prompt  int
	answer  answer
	index   int
	usage   bool // final usage chunk
	running bool // usage on every chunk
	started bool // the role chunk is out
	// finished is set once the chunk with the finish reason is queued.
	finished bool
	sent     int // tokens written so far
	text     []byte
	buf      bytes.Buffer
	tmpl     chunk // id, object, created, model
	// tokenIDs is set when the request asked for token ids: the first
	// chunk then carries promptIDs, every other one the ids of its
	// tokens (ids, reused).
	tokenIDs  bool
	promptIDs []int
	ids       []int
}

// stream serves a streaming request of one or more answers (n). As with
// vLLM the response (headers included) starts only when the first token
// exists, so a queued request looks like a slow connection; each answer
// then streams its chunks under its index, and the usage chunk, which
// counts the prompt once and every answer's tokens, and [DONE] end the
// stream once all are done. An outage or an injected disconnect (of the
// first answer) ends the stream without a finish reason or [DONE]; an
// injected stream error ends it with vLLM's error event and [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, j *job, seqs []*sequence) {
	sts := make([]*streamer, len(seqs))
	for k, seq := range seqs {
		st := &streamer{
			w:      w,
			rc:     http.NewResponseController(w),
			field:  s.cfg.ReasoningField,
			prompt: j.prompt,
			answer: seq.answer,
			index:  k,
			tmpl: chunk{ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: j.model,
				SystemFingerprint: schema.SimulatedFingerprint},
		}
		if j.sampling.tokenIDs {
			st.tokenIDs = true
			if k == 0 {
				st.promptIDs = promptTokenIDs(j.req.Messages)
			}
		}
		if o := j.req.StreamOptions; o != nil && o.IncludeUsage {
			st.usage = true
			st.running = o.ContinuousUsageStats // vLLM honours it only with include_usage
		}
		sts[k] = st
	}
	// wake gets a value whenever an answer grows or ends.
	wake := seqs[0].notify
	if len(seqs) > 1 {
		wake = make(chan struct{}, 1)
		for _, q := range seqs {
			go func() {
				for {
					select {
					case <-q.notify:
					case <-q.done:
						select {
						case wake <- struct{}{}:
						default:
						}
						return
					case <-r.Context().Done():
						return
					}
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}()
		}
	}
	seq, started := seqs[0], false
	for {
		select {
		case <-wake:
		case <-seq.done:
		case <-r.Context().Done():
			s.cancelAll(seqs)
			s.left(j.outage)
			return
		case <-j.outage:
			s.cancelAll(seqs)
			s.cut(w, started)
			return
		}
		all, some := true, false
		for _, q := range seqs {
			finished := isClosed(q.done)
			if finished && q.err != nil {
				s.cancelAll(seqs)
				if !started {
					writeError(w, http.StatusServiceUnavailable, "", "The engine stopped before the request finished.")
				}
				return // a started stream ends without [DONE]: cut short
			}
			all = all && finished
			some = some || finished || q.tokens.Load() > 0
		}
		if !some {
			continue
		}
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", "text/event-stream; charset=utf-8")
			h.Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
		}
		if n := int(seq.tokens.Load()); j.cutAt >= 0 && n >= j.cutAt {
			// What was generated up to the cut goes out, then the
			// connection closes or the error event ends the stream.
			sts[0].begin()
			sts[0].addTokens(j.cutAt, false)
			if j.cut == faultStreamError {
				s.cancelAll(seqs)
				s.counts.add(faultStreamError)
				sts[0].fail(engineFailedMessage)
				_ = sts[0].flush()
				return
			}
			_ = sts[0].flush()
			for _, q := range seqs[1:] {
				s.eng.cancel(q)
			}
			s.disconnect(seq)
		}
		for k, q := range seqs {
			finished := isClosed(q.done)
			n := int(q.tokens.Load())
			st := sts[k]
			if n == 0 && !finished || st.sent == n && (!finished || st.done()) {
				continue
			}
			st.begin()
			st.addTokens(n, finished)
		}
		if all {
			total := 0
			for _, q := range seqs {
				total += q.answer.tokens
			}
			sts[len(sts)-1].finish(total)
		}
		for _, st := range sts {
			if err := st.flush(); err != nil {
				// A failed write means the client left, or an outage
				// closed the connection; r.Context will say so too, but
				// free the slots now, and count the cut as the outage's.
				s.cancelAll(seqs)
				s.left(j.outage)
				return
			}
		}
		if all {
			s.cancelAll(seqs)
			return
		}
	}
}

// begin queues the answer's role chunk, once.
func (st *streamer) begin() {
	if st.started {
		return
	}
	st.started = true
	empty := ""
	st.add(delta{Role: "assistant", Content: &empty}, nil, 0, nil)
}

// done reports whether the answer's finish reason is out.
func (st *streamer) done() bool { return st.finished }

// addTokens queues chunks for the tokens from st.sent up to n; with
// finished set the last one carries the finish reason.
func (st *streamer) addTokens(n int, finished bool) {
	from, a := st.sent, st.answer
	var reason *string
	if finished {
		reason = &a.finishReason
	}
	if st.field == ReasoningFieldThink {
		st.text = appendReasoning(st.text[:0], a, from, n, true)
		st.text = appendContent(st.text, a, from, n, true)
		st.addText(false, n, reason, finished)
		return
	}
	mid := min(max(from, a.reasoning), n)
	if mid > from {
		st.text = appendReasoning(st.text[:0], a, from, mid, false)
		st.addText(true, mid, reason, finished && mid == n)
	}
	if n > mid || (finished && mid == from) {
		st.text = appendContent(st.text[:0], a, mid, n, false)
		st.addText(false, n, reason, finished)
	}
}

// addText queues st.text as reasoning or content, counting the answer
// as sent up to upTo tokens.
func (st *streamer) addText(reasoning bool, upTo int, reason *string, last bool) {
	var d delta
	if len(st.text) > 0 {
		text := string(st.text)
		if reasoning {
			setReasoning(st.field, text, &d.Reasoning, &d.ReasoningContent)
		} else {
			d.Content = &text
		}
	}
	if !last {
		reason = nil
	}
	var ids []int
	if st.tokenIDs {
		st.ids = appendTokenIDs(st.ids[:0], st.answer, st.sent, upTo)
		ids = st.ids
	}
	st.sent = upTo
	if reason != nil {
		st.finished = true
	}
	st.add(d, reason, upTo, ids)
}

// add queues one choice chunk; completion is the token count so far, for
// continuous usage stats, and ids the ids of the chunk's tokens when the
// request asked for them. The first chunk carries the prompt's ids.
func (st *streamer) add(d delta, reason *string, completion int, ids []int) {
	c := st.tmpl
	c.Choices = []chunkChoice{{Index: st.index, Delta: d, FinishReason: reason, TokenIDs: ids}}
	if st.running {
		c.Usage = makeUsage(st.prompt, completion)
	}
	if st.promptIDs != nil {
		c.PromptTokenIDs, st.promptIDs = st.promptIDs, nil
	}
	st.event(c)
}

// finish queues the usage chunk (if asked for), with the completion
// tokens of every answer, and the end marker.
func (st *streamer) finish(completion int) {
	if st.usage {
		c := st.tmpl
		c.Choices = []chunkChoice{}
		c.Usage = makeUsage(st.prompt, completion)
		st.event(c)
	}
	st.buf.WriteString("data: [DONE]\n\n")
}

// fail queues vLLM's error event for a generation that failed after the
// stream began, then the end marker, as chat_completion_stream_generator
// sends them. Type BadRequestError and code 400 are vLLM's defaults
// there: older versions send them whatever the cause, newer ones for
// errors such as a CUDA RuntimeError (they type an EngineDeadError or a
// request that finished with an error InternalServerError, 500). No
// finish reason or usage chunk precedes it.
func (st *streamer) fail(message string) {
	st.buf.WriteString("data: ")
	st.buf.Write(streamErrorData(http.StatusBadRequest, message))
	st.buf.WriteString("\n\ndata: [DONE]\n\n")
}

func (st *streamer) event(c chunk) {
	st.buf.WriteString("data: ")
	enc := json.NewEncoder(&st.buf)
	enc.SetEscapeHTML(false) // keep <think> readable, as Python's json does
	// Encoding a chunk of plain strings and numbers cannot fail.
	_ = enc.Encode(c)
	st.buf.WriteString("\n")
}

// flush writes the queued events and pushes them to the client.
func (st *streamer) flush() error {
	_, err := st.w.Write(st.buf.Bytes())
	st.buf.Reset()
	if err != nil {
		return fmt.Errorf("simulator: writing stream: %w", err)
	}
	if err := st.rc.Flush(); err != nil {
		return fmt.Errorf("simulator: flushing stream: %w", err)
	}
	return nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

package openai

import (
	"fmt"
	"time"
)

// A request of several answers (ChatRequest.N above 1) streams them
// interleaved, each chunk's choice under its index. vLLM sends one
// choice per chunk, and its running usage then counts that answer's
// tokens; the last usage chunk, with no choice, counts them all.

// choiceState accumulates one answer of a request of several.
type choiceState struct {
	seen         bool
	answer       answer
	finishReason string
	tokenIDs     []int
	// tokens is the answer's token count: its running usage when the
	// server sends it per answer, otherwise its chunks with text.
	tokens int
}

// chunkOfMany folds one chunk of a request of several answers into the
// state. A choice whose index was not asked for is ignored.
func (s *streamState) chunkOfMany(c *streamChunk) {
	text := false
	before := s.manyTokens()
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index < 0 || ch.Index >= len(s.more) {
			continue
		}
		st := &s.more[ch.Index]
		st.seen = true
		d := ch.Delta
		added := st.answer.add(d.Reasoning, d.ReasoningContent, d.Content)
		text = text || added
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			st.finishReason = *ch.FinishReason
		}
		if ch.TokenIDs != nil {
			st.tokenIDs = append(st.tokenIDs, ch.TokenIDs...)
		}
		switch {
		case c.Usage != nil && len(c.Choices) == 1:
			st.tokens = max(st.tokens, c.Usage.CompletionTokens)
		case added:
			st.tokens++
		}
	}
	if text && s.ttft == 0 {
		s.ttft = max(time.Since(s.begin), 1)
	}
	if c.Usage != nil && len(c.Choices) == 0 {
		s.usage = *c.Usage // the last chunk: every answer's tokens
	}
	if s.progress == nil {
		return
	}
	now := max(s.manyTokens(), s.usage.CompletionTokens)
	if now > before && now > s.counted {
		s.progress(now - s.counted)
		s.counted = now
	}
}

// manyTokens sums the answers' token counts.
func (s *streamState) manyTokens() int {
	n := 0
	for i := range s.more {
		n += s.more[i].tokens
	}
	return n
}

// checkChoices reports a stream of several answers that ended with one
// of those it sent unfinished, or none sent at all. Fewer answers than
// asked for is not an error here: a server that ignores n sends one,
// and the caller decides.
func (s *streamState) checkChoices(where string) error {
	sent := 0
	for i := range s.more {
		st := &s.more[i]
		if !st.seen {
			continue
		}
		sent++
		if st.finishReason == "" {
			return fmt.Errorf("%s: %w after %d chunks (no finish_reason for answer %d)", where, errStreamEnded, s.chunks, i)
		}
	}
	if sent == 0 || !s.more[0].seen {
		return fmt.Errorf("%s: %w after %d chunks (no answer 0)", where, errStreamEnded, s.chunks)
	}
	return nil
}

// fillChoices puts the answers of a request of several in comp: all of
// them, in index order up to the first index never sent, in Choices, and
// the first in comp's own fields.
func (s *streamState) fillChoices(comp *Completion) {
	for i := range s.more {
		st := &s.more[i]
		if !st.seen {
			break
		}
		r, c := st.answer.split()
		comp.Choices = append(comp.Choices, Choice{Reasoning: r, Content: c, FinishReason: st.finishReason, CompletionTokens: st.tokens, TokenIDs: st.tokenIDs})
	}
	first := comp.Choices[0]
	comp.Reasoning, comp.Content, comp.FinishReason, comp.TokenIDs = first.Reasoning, first.Content, first.FinishReason, first.TokenIDs
}

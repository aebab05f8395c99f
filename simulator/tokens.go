package simulator

import (
	"bytes"
	"math"
)

// Prompt token estimate. There is no tokenizer: a prompt costs one token
// per four bytes of content, and of reasoning content when a message
// carries it (each rounded up, about right for English with a BPE
// vocabulary), plus perMessageTokens for each message's role markers and
// replyPrimingTokens for the assistant header the chat template adds.
const (
	bytesPerToken      = 4
	perMessageTokens   = 4
	replyPrimingTokens = 3
)

// promptTokens is the deterministic prompt length estimate described
// above.
func promptTokens(messages []Message) int {
	n := replyPrimingTokens
	for _, m := range messages {
		n += perMessageTokens + textTokens(m.Content) + textTokens(m.ReasoningContent)
	}
	return n
}

// textTokens is the token estimate of a piece of text.
func textTokens(s string) int {
	return (len(s) + bytesPerToken - 1) / bytesPerToken
}

// answer is what the simulator will generate for one request: decided up
// front from the prompt and seed, so it is the same every time.
type answer struct {
	// hash identifies the prompt and seed; it also drives the text.
	hash uint64
	// tokens is how many tokens will be generated, reasoning included.
	tokens int
	// reasoning is how many of the first tokens are reasoning.
	reasoning int
	// finishReason is "stop", or "length" when max_tokens cut it short.
	finishReason string
	// stopped is set when a stop string ended the content. stopAt is
	// then the token whose word it cut: its text is the first stopKeep
	// bytes of the word and its space, and the tokens after it (the rest
	// of the stop string) have no text.
	stopped          bool
	stopAt, stopKeep int
}

// plan decides the answer to messages, sent without sampling fields,
// under the max_tokens limit (which must be >= 1).
func (c Config) plan(messages []Message, maxTokens int) answer {
	return c.planAnswer(promptHash(messages, c.Seed), &defaultSampling, maxTokens)
}

// planAnswer decides the answer drawn from hash h with sampling sp under
// the max_tokens limit (which must be >= 1).
//
// The answer has a natural length, split into reasoning and content by
// ReasoningShare; reasoning_effort scales the reasoning part and thinking
// turned off makes every token content. A stop string then ends the
// content where it first appears, and max_tokens cuts what is left.
func (c Config) planAnswer(h uint64, sp *sampling, maxTokens int) answer {
	natural := c.naturalLength(h)
	// The split is made on the answer the model would give; a cut by
	// max_tokens then removes its tail, so a short limit truncates the
	// reasoning and leaves no content, as with a real thinking model.
	reasoning := int(float64(natural) * c.reasoningFraction())
	reasoning = min(reasoning, natural-1)
	total := natural
	switch {
	case !sp.thinking:
		reasoning = 0
	case sp.effort != 1:
		scaled := int(math.Round(float64(reasoning) * sp.effort))
		total += scaled - reasoning
		reasoning = scaled
	}
	a := answer{hash: h, tokens: total, reasoning: reasoning, finishReason: finishStop}
	if len(sp.stop) > 0 {
		// A stop string completed after max_tokens was never seen.
		a.applyStop(sp.stop, min(total, maxTokens))
	}
	if a.tokens > maxTokens {
		a.tokens = maxTokens
		a.reasoning = min(a.reasoning, maxTokens)
		a.finishReason = finishLength
	}
	return a
}

// applyStop ends the answer at the stop string that completes first in
// the content of tokens [a.reasoning, upTo): the content ends just before
// it, and the tokens up to the one that completes it were generated
// (their text held back, as vLLM holds back a stop string).
func (a *answer) applyStop(stop []string, upTo int) {
	if upTo <= a.reasoning {
		return
	}
	text := appendWords(nil, *a, contentWords, a.reasoning, upTo)
	start, end := -1, -1
	for _, s := range stop {
		i := bytes.Index(text, []byte(s))
		if i < 0 {
			continue
		}
		if e := i + len(s); end < 0 || e < end || (e == end && i < start) {
			start, end = i, e
		}
	}
	if start < 0 {
		return
	}
	// Find the tokens holding the stop's first and last bytes.
	pos := 0
	for i := a.reasoning; i < upTo; i++ {
		next := pos + len(wordAt(*a, contentWords, i)) + 1
		if !a.stopped && start < next {
			a.stopped, a.stopAt, a.stopKeep = true, i, start-pos
		}
		if end <= next {
			a.tokens = i + 1
			return
		}
		pos = next
	}
}

// naturalLength draws the lognormal answer length for hash h.
func (c Config) naturalLength(h uint64) int {
	z := normalFrom(h)
	x := float64(c.OutputMedian) * math.Exp(c.OutputSigma*z)
	// Cap far above any context length before converting so a huge draw
	// cannot overflow int.
	x = math.Min(x, float64(c.MaxModelLen))
	return max(int(math.Round(x)), 1)
}

// promptHash is FNV-1a over the roles, contents and reasoning contents,
// with separators so that moving text between messages or fields changes
// it, mixed with the seed. A message without reasoning content hashes
// as it did before the field was read.
func promptHash(messages []Message, seed int64) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	add := func(s string, sep uint64) {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= prime
		}
		h ^= sep // separators: not bytes of valid UTF-8 text
		h *= prime
	}
	for _, m := range messages {
		add(m.Role, 0xff)
		add(m.Content, 0xff)
		if m.ReasoningContent != "" {
			add(m.ReasoningContent, 0xfe)
		}
	}
	return mix64(h ^ mix64(uint64(seed)))
}

// mix64 is the splitmix64 finalizer: a cheap bijection whose output bits
// all depend on all input bits.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// normalFrom turns a hash into a standard normal deviate (Box-Muller).
// It is written out rather than taken from math/rand so that lengths stay
// the same across Go releases.
func normalFrom(h uint64) float64 {
	a, b := mix64(h), mix64(h^0x5851f42d4c957f2d)
	// 53-bit uniforms; u1 in (0, 1] so the log is finite.
	u1 := (float64(a>>11) + 1) / (1 << 53)
	u2 := float64(b>>11) / (1 << 53)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

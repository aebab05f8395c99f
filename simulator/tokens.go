package simulator

import (
	"math"
)

// Prompt token estimate. There is no tokenizer: a prompt costs one token
// per four bytes of content (rounded up, about right for English with a
// BPE vocabulary), plus perMessageTokens for each message's role markers
// and replyPrimingTokens for the assistant header the chat template adds.
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
		n += perMessageTokens + (len(m.Content)+bytesPerToken-1)/bytesPerToken
	}
	return n
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
}

// plan decides the answer to messages under the max_tokens limit (which
// must be >= 1).
func (c Config) plan(messages []Message, maxTokens int) answer {
	h := promptHash(messages, c.Seed)
	natural := c.naturalLength(h)
	// The split is made on the answer the model would give; a cut by
	// max_tokens then removes its tail, so a short limit truncates the
	// reasoning and leaves no content, as with a real thinking model.
	reasoning := int(float64(natural) * c.reasoningFraction())
	reasoning = min(reasoning, natural-1)
	a := answer{hash: h, tokens: natural, reasoning: reasoning, finishReason: finishStop}
	if natural > maxTokens {
		a.tokens = maxTokens
		a.reasoning = min(reasoning, maxTokens)
		a.finishReason = finishLength
	}
	return a
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

// promptHash is FNV-1a over the roles and contents, with separators so
// that moving text between messages changes it, mixed with the seed.
func promptHash(messages []Message, seed int64) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= prime
		}
		h ^= 0xff // separator: not a byte of valid UTF-8 text
		h *= prime
	}
	for _, m := range messages {
		add(m.Role)
		add(m.Content)
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

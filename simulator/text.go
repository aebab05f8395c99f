package simulator

// Generated text is one pseudo-word per token, each followed by a space,
// picked by hashing the answer's hash with the token's position. Nothing
// is built up front: any range of an answer can be produced on demand, so
// a long answer costs memory only while it is being written out.
//
// Reasoning and content draw from disjoint word lists so that tests (and
// people reading a dump) can tell them apart.
var (
	reasoningWords = []string{
		"hmm", "so", "first", "consider", "then", "check", "wait",
		"because", "therefore", "maybe", "suppose", "step", "case",
		"again", "verify", "assume",
	}
	contentWords = []string{
		"lorem", "ipsum", "dolor", "sit", "amet", "consectetur",
		"adipiscing", "elit", "sed", "do", "eiusmod", "tempor",
		"incididunt", "ut", "labore", "magna",
	}
)

// Inline reasoning markers for ReasoningFieldThink.
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// appendWords appends the words for tokens [from, to) of answer a, taken
// from words.
func appendWords(buf []byte, a answer, words []string, from, to int) []byte {
	for i := from; i < to; i++ {
		w := words[mix64(a.hash+uint64(i))%uint64(len(words))]
		buf = append(buf, w...)
		buf = append(buf, ' ')
	}
	return buf
}

// appendReasoning appends the reasoning text of tokens [from, to),
// clipped to the reasoning part of a. With inline set the first
// reasoning token opens a <think> block.
func appendReasoning(buf []byte, a answer, from, to int, inline bool) []byte {
	to = min(to, a.reasoning)
	if from >= to {
		return buf
	}
	if inline && from == 0 {
		buf = append(buf, thinkOpen...)
	}
	return appendWords(buf, a, reasoningWords, from, to)
}

// appendContent appends the content text of tokens [from, to), clipped to
// the content part of a. With inline set the first content token closes
// the <think> block, so the block is closed only when the reasoning ran
// to its end (a truncated answer leaves it open, as a real one would).
func appendContent(buf []byte, a answer, from, to int, inline bool) []byte {
	from = max(from, a.reasoning)
	to = min(to, a.tokens)
	if from >= to {
		return buf
	}
	if inline && from == a.reasoning && a.reasoning > 0 {
		buf = append(buf, thinkClose...)
	}
	return appendWords(buf, a, contentWords, from, to)
}

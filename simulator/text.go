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

// wordIndex is the index in a word list (of n words) of token i of a.
func wordIndex(a answer, i, n int) int {
	return int(mix64(a.hash+uint64(i)) % uint64(n))
}

// wordAt is the word of token i of answer a, taken from words.
func wordAt(a answer, words []string, i int) string {
	return words[wordIndex(a, i, len(words))]
}

// appendWords appends the words for tokens [from, to) of answer a, taken
// from words.
func appendWords(buf []byte, a answer, words []string, from, to int) []byte {
	for i := from; i < to; i++ {
		buf = append(buf, wordAt(a, words, i)...)
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
	if !a.stopped || to <= a.stopAt {
		return appendWords(buf, a, contentWords, from, to)
	}
	// A stop string cut the word of token stopAt; the tokens after it
	// have no text.
	buf = appendWords(buf, a, contentWords, from, a.stopAt)
	if from <= a.stopAt {
		w := wordAt(a, contentWords, a.stopAt)
		keep := min(a.stopKeep, len(w))
		buf = append(buf, w[:keep]...)
		if a.stopKeep > len(w) {
			buf = append(buf, ' ')
		}
	}
	return buf
}

// Token ids. Each word of the generated text is one token with a fixed
// id: reasoning words from reasoningIDBase, content words from
// contentIDBase, in list order. Prompt text gets ids from promptIDBase
// up, by hashing each four-byte piece, and the chat template's markers
// the ids from markerIDBase, the top of a Kimi-sized vocabulary.
const (
	reasoningIDBase = 1000
	contentIDBase   = 2000
	promptIDBase    = 10000
	markerIDBase    = 163584 // 256 below 163840, Kimi-K2's vocabulary size

	markerStart = markerIDBase     // opens a message
	markerSep   = markerIDBase + 1 // ends the role header
	markerEnd   = markerIDBase + 2 // closes a message
)

// appendTokenIDs appends the ids of tokens [from, to) of answer a.
func appendTokenIDs(ids []int, a answer, from, to int) []int {
	to = min(to, a.tokens)
	for i := from; i < to; i++ {
		if i < a.reasoning {
			ids = append(ids, reasoningIDBase+wordIndex(a, i, len(reasoningWords)))
		} else {
			ids = append(ids, contentIDBase+wordIndex(a, i, len(contentWords)))
		}
	}
	return ids
}

// promptTokenIDs renders messages into exactly promptTokens(messages)
// ids: per message a start marker, the role, a separator, the content,
// the reasoning content and an end marker; then the header of the
// assistant's reply (start marker, role, separator).
func promptTokenIDs(messages []Message) []int {
	ids := make([]int, 0, promptTokens(messages))
	for _, m := range messages {
		ids = append(ids, markerStart, textID(m.Role), markerSep)
		ids = appendTextIDs(ids, m.Content)
		ids = appendTextIDs(ids, m.ReasoningContent)
		ids = append(ids, markerEnd)
	}
	return append(ids, markerStart, textID("assistant"), markerSep)
}

// appendTextIDs appends one id per bytesPerToken bytes of s.
func appendTextIDs(ids []int, s string) []int {
	for len(s) > 0 {
		n := min(bytesPerToken, len(s))
		ids = append(ids, textID(s[:n]))
		s = s[n:]
	}
	return ids
}

// textID is the id of a piece of prompt text.
func textID(s string) int {
	return promptIDBase + int(fnv(s)%(markerIDBase-promptIDBase))
}

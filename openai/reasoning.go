package openai

import "strings"

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// answer collects the two parts of a reply as they arrive. Servers put
// reasoning in one of three places: a separate "reasoning" field (vLLM
// 0.11 and later), a separate "reasoning_content" field (SGLang and older
// vLLM), or inline in the content between <think> tags when no reasoning
// parser is configured. answer accepts all three and yields one
// canonical split.
type answer struct {
	reasoning strings.Builder
	content   strings.Builder
}

// add appends one delta (or a whole non-streaming message). It reports
// whether the delta carried any text.
func (a *answer) add(reasoning, reasoningContent, content string) bool {
	a.reasoning.WriteString(reasoning)
	a.reasoning.WriteString(reasoningContent)
	a.content.WriteString(content)
	return reasoning != "" || reasoningContent != "" || content != ""
}

// split returns the final reasoning and content. Inline <think> tags are
// only interpreted when the server used neither reasoning field, so an
// answer that merely talks about such tags is left alone when reasoning
// was delivered separately.
func (a *answer) split() (reasoning, content string) {
	reasoning, content = a.reasoning.String(), a.content.String()
	if reasoning != "" {
		return reasoning, content
	}
	return splitThink(content)
}

// splitThink separates inline reasoning from content:
//
//   - "<think>R</think>C" (leading whitespace allowed) gives R trimmed and
//     C without its leading whitespace;
//   - "R</think>C" gives the same: the chat template opened the tag in the
//     prompt, so the reply starts inside it;
//   - "<think>R" with no closing tag is all reasoning (the answer was cut
//     off while thinking) and the content is empty;
//   - anything else is all content.
func splitThink(text string) (reasoning, content string) {
	rest := strings.TrimLeft(text, " \t\r\n")
	if after, ok := strings.CutPrefix(rest, thinkOpen); ok {
		inside, tail, closed := strings.Cut(after, thinkClose)
		if !closed {
			return strings.TrimSpace(after), ""
		}
		return strings.TrimSpace(inside), strings.TrimLeft(tail, " \t\r\n")
	}
	if inside, tail, closed := strings.Cut(text, thinkClose); closed {
		return strings.TrimSpace(inside), strings.TrimLeft(tail, " \t\r\n")
	}
	return "", text
}

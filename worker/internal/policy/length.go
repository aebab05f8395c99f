package policy

import "github.com/aerie-dev/aerie/schema"

// OnLength is what a run's on-length policy p does with an answer that
// stopped at max_tokens maxTokens after tokens completion tokens, base
// being the max_tokens of the run and the prompt's own parameters: keep
// it (0 and no error), ask again with next max_tokens, or refuse it (a
// *TruncatedError).
func OnLength(p schema.Policy, maxTokens, base, tokens int) (next int, err error) {
	switch p.Length() {
	case schema.OnLengthKeep:
		return 0, nil
	case schema.OnLengthRetry:
		if next := NextBudget(maxTokens, p.LengthRetryMaxTokens, base); next > maxTokens {
			return next, nil
		}
	}
	return 0, &TruncatedError{MaxTokens: maxTokens, CompletionTokens: tokens}
}

// NextBudget doubles max_tokens for a retry of a truncated answer, up to
// limit (zero: four times the run's max_tokens). It returns current when
// there is no room to grow, including when max_tokens is unset (the
// answer filled the context window).
func NextBudget(current, limit, runMax int) int {
	if current <= 0 {
		return current
	}
	if limit <= 0 {
		limit = 4 * runMax
	}
	return max(current, min(2*current, limit))
}

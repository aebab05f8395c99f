package dataset

import (
	"encoding/json"
	"fmt"
	"math"
)

// MaxLengthHint bounds a line's length_hint: no model answers ten million
// tokens, so a larger value is a mistake (a length in bytes or
// characters, or a column of another meaning).
const MaxLengthHint = 10_000_000

// BytesPerToken is how many bytes of text make a token, roughly, for a
// length hint taken from a dataset's own answer: about 4 for English with
// the tokenizers of current models. A hint only orders prompts, so its
// scale does not matter, only its ranks.
const BytesPerToken = 4

// lengthHint returns a line's hint of the tokens its answer will take:
// its length_hint when it has one (a whole number from 0 to
// MaxLengthHint), or else its own answer's size in tokens (answerBytes
// over BytesPerToken), or zero for none.
func lengthHint(raw json.RawMessage, answerBytes int) (int, error) {
	if !present(raw) {
		return (answerBytes + BytesPerToken - 1) / BytesPerToken, nil
	}
	var v float64
	if raw[0] == '"' || json.Unmarshal(raw, &v) != nil {
		return 0, fmt.Errorf("length_hint must be a number of tokens, found %s", kindOf(raw))
	}
	if v < 0 || v > MaxLengthHint || v != math.Trunc(v) {
		return 0, fmt.Errorf("length_hint %s: want a whole number of tokens from 0 to %d", raw, MaxLengthHint)
	}
	return int(v), nil
}

// answerSize is the size in bytes of an input turn's text, as written in
// the file (quotes and escapes included): close enough to the text's own
// size for a hint, and read without decoding it. A turn without text
// counts zero.
func answerSize(t turnFields) int {
	raw := t.Content
	if !present(raw) {
		raw = t.Value
	}
	if !present(raw) {
		return 0
	}
	return max(len(raw)-2, 0)
}

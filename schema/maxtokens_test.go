package schema_test

import (
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// MaxAnswerTokens is the longest request a run can make: its max_tokens,
// or the retries' cap with --on-length retry.
func TestMaxAnswerTokens(t *testing.T) {
	for _, c := range []struct {
		m    schema.Manifest
		want int
	}{
		{schema.Manifest{}, 0},
		{schema.Manifest{Params: schema.Params{MaxTokens: 2048}}, 2048},
		{schema.Manifest{Params: schema.Params{MaxTokens: 2048}, Policy: schema.Policy{OnLength: schema.OnLengthDeadLetter}}, 2048},
		{schema.Manifest{Params: schema.Params{MaxTokens: 2048}, Policy: schema.Policy{OnLength: schema.OnLengthRetry}}, 8192},
		{schema.Manifest{Params: schema.Params{MaxTokens: 2048}, Policy: schema.Policy{OnLength: schema.OnLengthRetry, LengthRetryMaxTokens: 5000}}, 5000},
		{schema.Manifest{Policy: schema.Policy{OnLength: schema.OnLengthRetry}}, 0},
	} {
		if got := c.m.MaxAnswerTokens(); got != c.want {
			t.Errorf("max_tokens %d, policy %+v: MaxAnswerTokens %d, want %d", c.m.Params.MaxTokens, c.m.Policy, got, c.want)
		}
	}
}

package simulator

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestPromptTokens(t *testing.T) {
	tests := []struct {
		messages []Message
		want     int
	}{
		{nil, 3},
		{userMessages(""), 3 + 4},
		{userMessages("abcd"), 3 + 4 + 1},
		{userMessages("abcde"), 3 + 4 + 2},
		{[]Message{{Role: "system", Content: "12345678"}, {Role: "user", Content: "x"}}, 3 + 4 + 2 + 4 + 1},
	}
	for _, tt := range tests {
		if got := promptTokens(tt.messages); got != tt.want {
			t.Errorf("promptTokens(%v) = %d, want %d", tt.messages, got, tt.want)
		}
	}
}

func TestOutputTokensDeterministic(t *testing.T) {
	a, err := New(Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Config{Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	differs := 0
	for i := range 50 {
		m := userMessages(fmt.Sprintf("question %d", i))
		if x, y := a.OutputTokens(m, 0), b.OutputTokens(m, 0); x != y {
			t.Fatalf("prompt %d: same seed gave %d and %d", i, x, y)
		}
		if a.OutputTokens(m, 0) != other.OutputTokens(m, 0) {
			differs++
		}
	}
	if differs < 40 {
		t.Errorf("seed 8 changed only %d of 50 lengths", differs)
	}
	m := userMessages("question 1")
	if n := a.OutputTokens(m, 5); n > 5 || n < 1 {
		t.Errorf("OutputTokens with max 5 = %d", n)
	}
	// Moving text between messages is a different prompt.
	x := []Message{{Role: "user", Content: "ab"}, {Role: "user", Content: "c"}}
	y := []Message{{Role: "user", Content: "a"}, {Role: "user", Content: "bc"}}
	if promptHash(x, 0) == promptHash(y, 0) {
		t.Errorf("hash ignores message boundaries")
	}
}

func TestOutputLengthDistribution(t *testing.T) {
	cfg := Config{}.WithDefaults()
	lengths := make([]int, 4000)
	sum := 0.0
	for i := range lengths {
		lengths[i] = cfg.naturalLength(promptHash(userMessages(fmt.Sprint(i)), 0))
		sum += float64(lengths[i])
	}
	slices.Sort(lengths)
	median := lengths[len(lengths)/2]
	if math.Abs(float64(median-cfg.OutputMedian)) > 0.1*float64(cfg.OutputMedian) {
		t.Errorf("median %d, want about %d", median, cfg.OutputMedian)
	}
	wantMean := float64(cfg.OutputMedian) * math.Exp(cfg.OutputSigma*cfg.OutputSigma/2)
	if mean := sum / float64(len(lengths)); math.Abs(mean-wantMean) > 0.12*wantMean {
		t.Errorf("mean %.0f, want about %.0f", mean, wantMean)
	}
	if lengths[0] < 1 {
		t.Errorf("shortest answer %d tokens", lengths[0])
	}
}

func TestPlanSplit(t *testing.T) {
	cfg := Config{}.WithDefaults()
	m := userMessages("split me")
	full := cfg.plan(m, 1<<20)
	if full.finishReason != finishStop {
		t.Fatalf("finish %q without a limit", full.finishReason)
	}
	share := float64(full.reasoning) / float64(full.tokens)
	if math.Abs(share-cfg.ReasoningShare) > 0.01 || full.tokens-full.reasoning < 1 {
		t.Errorf("split %d reasoning of %d", full.reasoning, full.tokens)
	}
	cut := cfg.plan(m, full.reasoning/2)
	if cut.finishReason != finishLength || cut.tokens != full.reasoning/2 || cut.reasoning != cut.tokens {
		t.Errorf("cut inside reasoning: %+v", cut)
	}
	cfg.ReasoningShare = -1
	if a := cfg.plan(m, 1<<20); a.reasoning != 0 {
		t.Errorf("negative share gave %d reasoning tokens", a.reasoning)
	}
	cfg.ReasoningShare = 0.99
	cfg.OutputMedian, cfg.OutputSigma = 1, 1e-9
	if a := cfg.plan(m, 10); a.tokens != 1 || a.reasoning != 0 {
		t.Errorf("one-token answer: %+v, want its token to be content", a)
	}
}

func TestTextRanges(t *testing.T) {
	a := answer{hash: 42, tokens: 10, reasoning: 6}
	whole := string(appendContent(appendReasoning(nil, a, 0, 10, true), a, 0, 10, true))
	var pieces []byte
	for i := range 10 {
		pieces = appendReasoning(pieces, a, i, i+1, true)
		pieces = appendContent(pieces, a, i, i+1, true)
	}
	if string(pieces) != whole {
		t.Errorf("token by token %q, at once %q", pieces, whole)
	}
	in, out := countWords(string(appendReasoning(nil, a, 0, 10, false)), reasoningWords)
	if in != 6 || out != 0 {
		t.Errorf("reasoning words: %d in list, %d not", in, out)
	}
	in, out = countWords(string(appendContent(nil, a, 0, 10, false)), contentWords)
	if in != 4 || out != 0 {
		t.Errorf("content words: %d in list, %d not", in, out)
	}
}

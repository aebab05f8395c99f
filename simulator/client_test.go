package simulator_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// The simulator's token ids reach aerie's client, streamed or not, and
// re-sending the same context with the same seed gives the same answer.
func TestTokenIDsThroughClient(t *testing.T) {
	url := simtest.Serve(t, simulator.Config{Speed: 500, OutputMedian: 60, OutputSigma: 0.3, Seed: 4})
	c, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	temp, seed, topK := 0.8, int64(12), 20
	req := openai.ChatRequest{
		Messages: []openai.Message{
			{Role: "user", Content: "2+2?"},
			{Role: "assistant", Content: "4", ReasoningContent: "two and two"},
			{Role: "user", Content: "and 3+3?"},
		},
		Temperature:        &temp,
		Seed:               &seed,
		TopK:               &topK,
		Stop:               []string{"zzz"},
		ReasoningEffort:    "high",
		ChatTemplateKwargs: json.RawMessage(`{"enable_thinking": true}`),
		ReturnTokenIDs:     true,
		ExtraBody:          json.RawMessage(`{"top_k": 30, "priority": 0}`),
	}
	streamed, err := c.ChatStream(ctx, req, nil)
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if len(streamed.TokenIDs) != streamed.Usage.CompletionTokens || streamed.Usage.CompletionTokens == 0 {
		t.Errorf("streamed: %d token ids for %d completion tokens", len(streamed.TokenIDs), streamed.Usage.CompletionTokens)
	}
	if len(streamed.PromptTokenIDs) != streamed.Usage.PromptTokens || streamed.Usage.PromptTokens == 0 {
		t.Errorf("streamed: %d prompt token ids for %d prompt tokens", len(streamed.PromptTokenIDs), streamed.Usage.PromptTokens)
	}
	if streamed.Reasoning == "" || streamed.Content == "" {
		t.Errorf("streamed: reasoning %q, content %q", streamed.Reasoning, streamed.Content)
	}
	whole, err := c.Chat(ctx, req)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if whole.Reasoning != streamed.Reasoning || whole.Content != streamed.Content || whole.Usage != streamed.Usage {
		t.Errorf("the same context and seed answered differently:\n%.80q %.80q\n%.80q %.80q",
			whole.Reasoning, whole.Content, streamed.Reasoning, streamed.Content)
	}
	if !slices.Equal(whole.TokenIDs, streamed.TokenIDs) || !slices.Equal(whole.PromptTokenIDs, streamed.PromptTokenIDs) {
		t.Error("the same request got different token ids streamed and whole")
	}

	// The extra body's top_k replaced the field's: the answer is that of
	// top_k 30.
	req.TopK, req.ExtraBody = nil, json.RawMessage(`{"top_k": 30}`)
	viaExtra, err := c.Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	k30 := 30
	req.TopK, req.ExtraBody = &k30, nil
	direct, err := c.Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if viaExtra.Content != direct.Content || viaExtra.Content != whole.Content {
		t.Error("top_k 30 sent in the extra body and as a field answered differently")
	}

	// Without ReturnTokenIDs there are none.
	req.ReturnTokenIDs = false
	plain, err := c.ChatStream(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.TokenIDs != nil || plain.PromptTokenIDs != nil || plain.Content != whole.Content {
		t.Errorf("without token ids: %v %v %q", plain.PromptTokenIDs, plain.TokenIDs, plain.Content)
	}

	// A stop string ends the content just before it.
	words := strings.Fields(whole.Content)
	req.Stop = []string{" " + words[2] + " "}
	stopped, err := c.Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(whole.Content, req.Stop[0])
	if stopped.Content != whole.Content[:cut] || stopped.FinishReason != "stop" || stopped.Reasoning != whole.Reasoning {
		t.Errorf("with stop %q: content %q, finish %q", req.Stop[0], stopped.Content, stopped.FinishReason)
	}
}

// The n answers of one request reach aerie's client, streamed or not,
// and answer k is the one a request of its own with seed + k gets.
func TestSeveralAnswersThroughClient(t *testing.T) {
	url := simtest.Serve(t, simulator.Config{Speed: 500, OutputMedian: 60, OutputSigma: 0.3})
	c, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	temp, seed := 0.8, int64(40)
	req := openai.ChatRequest{Messages: []openai.Message{{Role: "user", Content: "three answers"}}, Temperature: &temp, Seed: &seed, N: 3, ReturnTokenIDs: true}
	streamed, err := c.ChatStream(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := c.Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(streamed.Choices) != 3 || len(whole.Choices) != 3 {
		t.Fatalf("%d answers streamed, %d whole; want 3", len(streamed.Choices), len(whole.Choices))
	}
	total := 0
	for k := range 3 {
		one := req
		s := seed + int64(k)
		one.Seed, one.N = &s, 0
		alone, err := c.ChatStream(ctx, one, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, got := range map[string]openai.Choice{"streamed": streamed.Choices[k], "whole": whole.Choices[k]} {
			if got.Reasoning != alone.Reasoning || got.Content != alone.Content || got.FinishReason != alone.FinishReason ||
				got.CompletionTokens != alone.Usage.CompletionTokens || !slices.Equal(got.TokenIDs, alone.TokenIDs) {
				t.Errorf("%s answer %d differs from the request with seed %d alone", name, k, s)
			}
		}
		total += alone.Usage.CompletionTokens
	}
	if streamed.Usage.CompletionTokens != total || whole.Usage.CompletionTokens != total {
		t.Errorf("usage %d streamed, %d whole; want %d", streamed.Usage.CompletionTokens, whole.Usage.CompletionTokens, total)
	}
}

package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// TestEveryRequestFieldReachesTheBackend runs `aerie run` with every
// sampling flag, --samples 3 and --return-token-ids against a backend that
// records what it is asked, with one input line carrying its own params,
// and checks each request body field by field and each output line.
func TestEveryRequestFieldReachesTheBackend(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	lines := []string{
		`{"id": "plain-1", "prompt": "question plain-1"}`,
		`{"id": "plain-2", "messages": [{"role": "user", "content": "question plain-2"}]}`,
		`{"id": "own", "prompt": "question own", "params": {"top_k": 5, "seed": 100, "temperature": 0.2, "stop": "HALT",
			"chat_template_kwargs": {"b": true}, "ignore_eos": false, "logit_bias": {"7": -1}}}`,
	}
	for i := range lines {
		lines[i] = strings.ReplaceAll(strings.ReplaceAll(lines[i], "\n", ""), "\t", "")
	}
	if err := os.WriteFile(prompts, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	backend := newRecordingBackend(t, simtest.Serve(t, simulator.Config{Speed: 1000, OutputMedian: 60}))
	data := filepath.Join(dir, "data")
	aerie(t, bin, "run", "--run", "fields", "--prompts", prompts, "--data-dir", data, "--backend", backend.url,
		"--model", "moonshotai/Kimi-K2.5", "--max-tokens", "700", "--temperature", "0.6", "--top-p", "0.9",
		"--top-k", "20", "--min-p", "0.05", "--presence-penalty", "0.5", "--frequency-penalty", "0.25",
		"--repetition-penalty", "1.1", "--seed", "42", "--stop", "END", "--stop", "STOP", "--reasoning-effort", "high",
		"--chat-template-kwargs", `{"enable_thinking": true, "a": 1}`, "--extra-body", `{"ignore_eos": true, "min_tokens": 2}`,
		"--samples", "3", "--return-token-ids").wait(t, 2*time.Minute)

	run := map[string]any{
		"model": "moonshotai/Kimi-K2.5", "max_tokens": 700.0, "temperature": 0.6, "top_p": 0.9, "top_k": 20.0, "min_p": 0.05,
		"presence_penalty": 0.5, "frequency_penalty": 0.25, "repetition_penalty": 1.1, "stop": []any{"END", "STOP"},
		"reasoning_effort": "high", "chat_template_kwargs": map[string]any{"a": 1.0, "enable_thinking": true},
		"ignore_eos": true, "min_tokens": 2.0, "return_token_ids": true, "stream": true, "n": 3.0,
	}
	own := map[string]any{}
	for k, v := range run {
		own[k] = v
	}
	own["top_k"], own["temperature"], own["stop"] = 5.0, 0.2, []any{"HALT"}
	own["chat_template_kwargs"] = map[string]any{"a": 1.0, "b": true, "enable_thinking": true}
	own["ignore_eos"], own["logit_bias"] = false, map[string]any{"7": -1.0}

	seeds := map[string][]float64{}
	for _, r := range backend.recorded() {
		var body map[string]any
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		msgs, _ := body["messages"].([]any)
		content := ""
		if len(msgs) > 0 {
			content, _ = msgs[len(msgs)-1].(map[string]any)["content"].(string)
		}
		if content == preflightPrompt {
			continue
		}
		id := strings.TrimPrefix(content, "question ")
		want := run
		if id == "own" {
			want = own
		}
		for k, v := range want {
			if !reflect.DeepEqual(body[k], v) {
				t.Errorf("%s: request field %s is %v, want %v", id, k, body[k], v)
			}
		}
		seed, _ := body["seed"].(float64)
		seeds[id] = append(seeds[id], seed)
	}
	// The three samples of a prompt in one request (n 3), with the first
	// sample's seed: the server gives answer k the seed plus k.
	for id, want := range map[string][]float64{"plain-1": {42}, "plain-2": {42}, "own": {100}} {
		got := append([]float64(nil), seeds[id]...)
		if !sameSet(got, want) {
			t.Errorf("%s was asked with seeds %v, want one request of its three samples with %v", id, got, want)
		}
	}

	type outLine struct {
		ID             string         `json:"id"`
		Sample         int            `json:"sample"`
		Params         map[string]any `json:"params"`
		TokenIDs       []int          `json:"token_ids"`
		PromptTokenIDs []int          `json:"prompt_token_ids"`
		Usage          struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	b, err := os.ReadFile(filepath.Join(data, "fields", "completions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]int{}
	for _, raw := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var l outLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatal(err)
		}
		samples[fmt.Sprintf("%s/%d", l.ID, l.Sample)]++
		base := 42.0
		if l.ID == "own" {
			base = 100
			if l.Params["top_k"] != 5.0 || l.Params["temperature"] != 0.2 {
				t.Errorf("own/%d: its own params are not recorded: %v", l.Sample, l.Params)
			}
		}
		if l.Params["seed"] != base+float64(l.Sample) {
			t.Errorf("%s/%d: params record seed %v, want %v", l.ID, l.Sample, l.Params["seed"], base+float64(l.Sample))
		}
		if len(l.TokenIDs) != l.Usage.CompletionTokens || len(l.PromptTokenIDs) == 0 {
			t.Errorf("%s/%d: %d token ids for %d completion tokens, %d prompt token ids", l.ID, l.Sample, len(l.TokenIDs), l.Usage.CompletionTokens, len(l.PromptTokenIDs))
		}
	}
	for _, id := range []string{"plain-1", "plain-2", "own"} {
		for s := range 3 {
			if n := samples[fmt.Sprintf("%s/%d", id, s)]; n != 1 {
				t.Errorf("%s sample %d: %d lines, want 1", id, s, n)
			}
		}
	}
	if len(samples) != 9 {
		t.Errorf("%d distinct (id, sample) lines, want 9: %v", len(samples), samples)
	}
}

func sameSet(a, b []float64) bool {
	seen := map[float64]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

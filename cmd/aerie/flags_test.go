package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// Every setting flag of aerie produce ends up in the run manifest, and
// --samples queues each prompt once per sample.
func TestProduceFlagsReachTheManifest(t *testing.T) {
	bin := buildAerie(t)
	s := brokertest.Start(t)
	_, js := brokertest.Connect(t, s)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "12", "--turns", "3", "--out", prompts).wait(t, time.Minute)

	args := []string{"produce", "--nats", s.ClientURL(), "--run", "flags", "--prompts", prompts, "--model", "m",
		"--max-tokens", "512", "--temperature", "0.6", "--top-p", "0.95", "--top-k", "20", "--min-p", "0.05",
		"--presence-penalty", "0.5", "--frequency-penalty", "-0.5", "--repetition-penalty", "1.05", "--seed", "9007199254740993",
		"--stop", "</answer>", "--stop", "END", "--reasoning-effort", "high",
		"--chat-template-kwargs", `{"thinking": true, "a": {"z": 1, "y": 2}}`, "--extra-body", `{"top_a": 0.1}`,
		"--turns", "all", "--context-reasoning", "keep", "--samples", "3", "--return-token-ids"}
	p := aerie(t, bin, args...)
	p.wait(t, 2*time.Minute)
	if out := p.stdout.String(); !strings.Contains(out, "12 prompts valid x 3 samples = 36 samples, 36 newly queued, 0 already queued") {
		t.Errorf("produce said: %s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "flags")
	if err != nil {
		t.Fatal(err)
	}
	m, err := schema.DecodeManifest(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	topK, seed := 20, int64(9007199254740993)
	want := schema.Params{MaxTokens: 512, Temperature: f(0.6), TopP: f(0.95), TopK: &topK, MinP: f(0.05),
		PresencePenalty: f(0.5), FrequencyPenalty: f(-0.5), RepetitionPenalty: f(1.05), Seed: &seed,
		Stop: []string{"</answer>", "END"}, ReasoningEffort: "high",
		ChatTemplateKwargs: json.RawMessage(`{"a":{"y":2,"z":1},"thinking":true}`), ExtraBody: json.RawMessage(`{"top_a":0.1}`)}
	got := m.Params
	got.ChatTemplateKwargs, _ = schema.CanonicalObject(got.ChatTemplateKwargs) // stored indented
	got.ExtraBody, _ = schema.CanonicalObject(got.ExtraBody)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("manifest params\n%+v\nwant\n%+v", got, want)
	}
	if m.Turns != schema.TurnsAll || m.ContextReasoning != schema.ContextReasoningKeep || m.Samples != 3 || !m.ReturnTokenIDs ||
		m.Prompts != 12 || m.Total != 36 || m.TotalTurns <= m.Total {
		t.Errorf("manifest %+v", m)
	}
	stream, err := js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := stream.CachedInfo().State.Msgs; n != 36 {
		t.Errorf("prompts stream holds %d messages, want 36", n)
	}

	// The same produce again queues nothing; with one setting changed it
	// is refused, naming it.
	again := aerie(t, bin, args...)
	again.wait(t, 2*time.Minute)
	if out := again.stdout.String(); !strings.Contains(out, "0 newly queued, 36 already queued") {
		t.Errorf("second produce said: %s", out)
	}
	changed := append(append([]string(nil), args...), "--top-k", "40")
	c := aerie(t, bin, changed...)
	if code := c.exit(t, time.Minute); code != 1 || !strings.Contains(c.stderr.String(), "top_k is 20 in the stored manifest, 40 now") {
		t.Errorf("changed --top-k: exit %d, stderr:\n%s", code, c.stderr.String())
	}
}

// A flag with a value it cannot take is refused, naming the flag and what
// is wrong, before anything is read or connected to.
func TestProduceFlagErrors(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	nowhere := "nats://" + freeAddr(t)
	base := []string{"produce", "--run", "r", "--prompts", filepath.Join(dir, "missing.jsonl"), "--model", "m", "--nats", nowhere}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--chat-template-kwargs", `[1]`}, `invalid value "[1]" for flag -chat-template-kwargs: must be a JSON object, found an array`},
		{[]string{"--chat-template-kwargs", `{"a":`}, "flag -chat-template-kwargs: not JSON"},
		{[]string{"--extra-body", `{"n": 2}`}, `flag -extra-body: extra body sets "n", which aerie sets itself: use --samples`},
		{[]string{"--extra-body", `{"messages": []}`}, `flag -extra-body: extra body sets "messages"`},
		{[]string{"--top-k", "2.5"}, `flag -top-k: "2.5" is not an integer`},
		{[]string{"--seed", "x"}, `flag -seed: "x" is not a 64-bit integer`},
		{[]string{"--stop", ""}, "flag -stop: empty"},
		{[]string{"--top-k", "-3"}, "--top-k: top_k is -3"},
		{[]string{"--min-p", "2"}, "--min-p: min_p is 2"},
		{[]string{"--reasoning-effort", "max"}, `--reasoning-effort: reasoning_effort is "max"`},
		{[]string{"--turns", "first"}, `--turns "first": use last or all`},
		{[]string{"--context-reasoning", "keep"}, "--context-reasoning keep needs --turns all"},
		{[]string{"--samples", "0"}, "--samples 0: use 1 to 1000"},
	} {
		p := aerie(t, bin, append(append([]string(nil), base...), tc.flags...)...)
		code := p.exit(t, time.Minute)
		if code == 0 || !strings.Contains(p.stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr does not say %q:\n%s", tc.flags, code, tc.want, p.stderr.String())
		}
	}
}

// A window flag whose zero would be read as its default is refused by
// aerie work and aerie run alike, before anything is connected to.
func TestWindowFlagErrors(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	nowhere := "nats://" + freeAddr(t)
	for _, cmd := range [][]string{
		{"work", "--run", "r", "--nats", nowhere, "--backend", "http://" + freeAddr(t)},
		{"run", "--run", "r", "--prompts", filepath.Join(dir, "missing.jsonl"), "--data-dir", dir},
	} {
		for _, tc := range []struct {
			flags []string
			want  string
		}{
			{[]string{"--window", "auto", "--max-window", "0"}, "--max-window 0: want the most requests"},
			{[]string{"--window-poll", "0s"}, "--window-poll 0s: want how often"},
			{[]string{"--hand-back-after", "-1s"}, "--hand-back-after -1s: want a wait of at least 0"},
			{[]string{"--hedge", "always"}, `--hedge "always": want auto`},
			{[]string{"--hedge-max", "-1"}, "--hedge-max -1: want the most hedges"},
		} {
			p := aerie(t, bin, append(append([]string(nil), cmd...), tc.flags...)...)
			code := p.exit(t, time.Minute)
			if code == 0 || !strings.Contains(p.stderr.String(), tc.want) {
				t.Errorf("%s %v: exit %d, stderr does not say %q:\n%s", cmd[0], tc.flags, code, tc.want, p.stderr.String())
			}
		}
	}
}

// gen-prompts --turns 3 writes conversations of 1 to 3 user turns that
// --turns all reads, each assistant turn right after a user turn.
func TestGenPromptsTurns(t *testing.T) {
	bin := buildAerie(t)
	path := filepath.Join(t.TempDir(), "turns.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "300", "--turns", "3", "--seed", "5", "--out", path).wait(t, time.Minute)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[int]int{}
	lines := bufio.NewScanner(f)
	n := 0
	for lines.Scan() {
		n++
		l, err := dataset.ParseLineWith(lines.Bytes(), dataset.ParseOptions{Turns: schema.TurnsAll})
		if err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		users := 0
		for _, m := range l.Messages {
			if m.Role == "user" {
				users++
			}
		}
		if turns := schema.TurnSlots(l.Messages); turns != users {
			t.Fatalf("line %d: %d turns for %d user messages", n, turns, users)
		}
		counts[users]++
	}
	if n != 300 || len(counts) != 3 || counts[1] < 60 || counts[2] < 60 || counts[3] < 60 {
		t.Fatalf("%d lines; conversations by user turns: %v", n, counts)
	}
	again := filepath.Join(t.TempDir(), "again.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "300", "--turns", "3", "--seed", "5", "--out", again).wait(t, time.Minute)
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Error("gen-prompts --turns 3 is not deterministic for a seed")
	}
}

// produce says in which order it queued the prompts and why; --order
// picks it, and an unknown order is refused before anything is queued.
func TestProduceOrder(t *testing.T) {
	bin := buildAerie(t)
	s := brokertest.Start(t)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "hinted.jsonl")
	lines := `{"id": "a", "prompt": "q", "length_hint": 10}` + "\n" + `{"id": "b", "prompt": "q", "length_hint": 900}` + "\n" + `{"id": "c", "prompt": "q"}` + "\n"
	if err := os.WriteFile(prompts, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	produce := func(run string, extra ...string) *proc {
		return aerie(t, bin, append([]string{"produce", "--nats", s.ClientURL(), "--run", run, "--prompts", prompts, "--model", "m"}, extra...)...)
	}
	p := produce("auto")
	p.wait(t, time.Minute)
	if out := p.stdout.String(); !strings.Contains(out, "queued longest-first (2 of 3 with a length hint)") {
		t.Errorf("default order: %s", out)
	}
	p = produce("input", "--order", "input")
	p.wait(t, time.Minute)
	if out := p.stdout.String(); !strings.Contains(out, "queued input (2 of 3 with a length hint)") {
		t.Errorf("--order input: %s", out)
	}
	bad := produce("bad", "--order", "shortest-first")
	if code := bad.exit(t, time.Minute); code == 0 || !strings.Contains(bad.stderr.String(), `order "shortest-first": use input or longest-first`) {
		t.Errorf("unknown order: exit %d: %s", code, bad.stderr.String())
	}
}

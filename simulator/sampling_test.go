package simulator

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// predict is the answer the server plans for body, a request that is
// not random (it has a seed, or no temperature above 0).
func (ts *testServer) predict(t *testing.T, body map[string]any) answer {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	var req chatRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	sp, rerr := parseSampling(&req)
	if rerr != nil {
		t.Fatalf("request refused: %s", rerr.message)
	}
	if sp.random {
		t.Fatal("a random request cannot be predicted")
	}
	limit := ts.cfg.MaxModelLen - promptTokens(req.Messages)
	if req.MaxTokens != nil {
		limit = *req.MaxTokens
	}
	return ts.cfg.planAnswer(ts.cfg.requestKey(req.Messages, &sp), &sp, limit)
}

// fast is a config whose answers of about 60 tokens take a few
// milliseconds.
func fast(field string) Config {
	return Config{Speed: 500, ReasoningField: field, OutputMedian: 60, OutputSigma: 0.3, Seed: 11}
}

// reply is the text and figures of one answer, streamed or not.
type reply struct {
	reasoning, content string
	finish             string
	usage              usage
	promptIDs, ids     []int
	hasIDs             bool // the response carried token_ids or prompt_token_ids
}

// ask sends body (a non-streaming request) and reads the reply.
func (ts *testServer) ask(t *testing.T, body map[string]any) reply {
	t.Helper()
	delete(body, "stream")
	status, raw := rawAnswer(t, ts, body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	var r struct {
		Choices []struct {
			Message struct {
				Content          *string `json:"content"`
				Reasoning        string  `json:"reasoning"`
				ReasoningContent string  `json:"reasoning_content"`
			} `json:"message"`
			Finish   string `json:"finish_reason"`
			TokenIDs []int  `json:"token_ids"`
		} `json:"choices"`
		Usage          usage `json:"usage"`
		PromptTokenIDs []int `json:"prompt_token_ids"`
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	m := r.Choices[0].Message
	out := reply{reasoning: m.Reasoning + m.ReasoningContent, finish: r.Choices[0].Finish, usage: r.Usage,
		promptIDs: r.PromptTokenIDs, ids: r.Choices[0].TokenIDs,
		hasIDs: strings.Contains(raw, `"token_ids"`) || strings.Contains(raw, `"prompt_token_ids"`)}
	if m.Content != nil {
		out.content = *m.Content
	}
	return out
}

// askStream sends body as a streaming request and assembles the reply.
func (ts *testServer) askStream(t *testing.T, body map[string]any) reply {
	t.Helper()
	b := maps.Clone(body)
	b["stream_options"] = map[string]any{"include_usage": true}
	var out reply
	for i, c := range ts.stream(t, b) {
		if c.Usage != nil && len(c.Choices) == 0 {
			out.usage = *c.Usage
		}
		if c.PromptTokenIDs != nil {
			if i != 0 {
				t.Errorf("prompt_token_ids on chunk %d, want it on the first only", i)
			}
			out.promptIDs, out.hasIDs = c.PromptTokenIDs, true
		}
		for _, ch := range c.Choices {
			if s, ok := ch.Delta["content"].(string); ok {
				out.content += s
			}
			if s, ok := ch.Delta["reasoning"].(string); ok {
				out.reasoning += s
			}
			if s, ok := ch.Delta["reasoning_content"].(string); ok {
				out.reasoning += s
			}
			if ch.Finish != nil {
				out.finish = *ch.Finish
			}
			if ch.TokenIDs != nil {
				out.ids, out.hasIDs = append(out.ids, ch.TokenIDs...), true
			}
		}
	}
	return out
}

func (r reply) text() string { return r.reasoning + "|" + r.content }

func TestSamplingValidation(t *testing.T) {
	ts := startServer(t, fast(ReasoningFieldReasoning))
	hi := userMessages("hi")
	bad := []struct {
		param string
		value any
	}{
		{"temperature", -0.1},
		{"top_p", 0},
		{"top_p", 1.5},
		{"top_k", -2},
		{"top_k", 1.5},
		{"top_k", "5"},
		{"min_p", -0.1},
		{"min_p", 1.1},
		{"presence_penalty", 2.5},
		{"presence_penalty", -2.01},
		{"frequency_penalty", 3},
		{"frequency_penalty", -3},
		{"repetition_penalty", 0},
		{"repetition_penalty", -1},
		{"seed", 1.5},
		{"seed", "7"},
		{"seed", 1e30},
		{"stop", 5},
		{"stop", []any{"a", 1}},
		{"stop", map[string]any{"a": "b"}},
		{"reasoning_effort", "extreme"},
		{"reasoning_effort", ""},
		{"reasoning_effort", 3},
		{"chat_template_kwargs", []any{1}},
		{"chat_template_kwargs", "enable_thinking"},
		{"chat_template_kwargs", 5},
		{"return_token_ids", "yes"},
	}
	for _, tt := range bad {
		t.Run(fmt.Sprintf("%s=%v", tt.param, tt.value), func(t *testing.T) {
			status, e, _ := errorBody(t, ts, map[string]any{"messages": hi, tt.param: tt.value})
			if status != http.StatusBadRequest || e.Type != "BadRequestError" || e.Code != 400 || e.Message == "" {
				t.Errorf("status %d error %+v", status, e)
			}
			if e.Param == nil || *e.Param != tt.param {
				t.Errorf("param %v, want %q (message %q)", e.Param, tt.param, e.Message)
			}
		})
	}
	good := []map[string]any{
		{"top_k": -1, "min_p": 0, "presence_penalty": -2, "frequency_penalty": 2, "repetition_penalty": 0.5},
		{"top_k": 0, "min_p": 1, "top_p": 1, "temperature": 0, "seed": -3},
		{"top_k": 1, "seed": int64(math.MaxInt64), "stop": "x"},
		{"stop": []string{"a", "b"}, "reasoning_effort": "minimal", "chat_template_kwargs": map[string]any{}},
		{"stop": nil, "seed": nil, "top_k": nil, "chat_template_kwargs": nil, "reasoning_effort": "low"},
		{"reasoning_effort": "medium", "return_token_ids": false},
		{"reasoning_effort": "high", "return_token_ids": true},
		// Fields the simulator does not know are accepted and ignored;
		// priority 0 is every request's under the fcfs policy.
		{"logit_bias": map[string]any{"5": 1}, "guided_json": map[string]any{}, "priority": 0, "n": 1},
	}
	for i, fields := range good {
		body := map[string]any{"messages": hi}
		maps.Copy(body, fields)
		if r := ts.ask(t, body); r.usage.CompletionTokens < 1 {
			t.Errorf("good request %d: %+v", i, r)
		}
	}
}

func TestDeterminismRule(t *testing.T) {
	ts := startServer(t, fast(ReasoningFieldReasoning))
	messages := userMessages("same context, several answers")
	with := func(fields map[string]any) map[string]any {
		body := map[string]any{"messages": messages}
		maps.Copy(body, fields)
		return body
	}
	same := func(name string, fields map[string]any) reply {
		t.Helper()
		a, b := ts.ask(t, with(fields)), ts.ask(t, with(fields))
		if a.text() != b.text() || a.usage != b.usage {
			t.Errorf("%s: two answers differ:\n%.80q\n%.80q", name, a.text(), b.text())
		}
		return a
	}

	// No seed and no temperature: the answer it always was.
	plain := same("no seed, no temperature", nil)
	if want := ts.OutputTokens(messages, 0); plain.usage.CompletionTokens != want {
		t.Errorf("plain request: %d tokens, want %d as before sampling fields existed", plain.usage.CompletionTokens, want)
	}
	same("temperature 0", map[string]any{"temperature": 0})
	same("seed and temperature", map[string]any{"seed": 7, "temperature": 0.8})

	// Seeds s, s+1, s+2 give different answers.
	seen := map[string]int64{}
	for s := int64(100); s < 103; s++ {
		r := same(fmt.Sprint("seed ", s), map[string]any{"seed": s, "temperature": 0.8})
		if prev, ok := seen[r.text()]; ok {
			t.Errorf("seeds %d and %d gave the same answer", prev, s)
		}
		seen[r.text()] = s
	}

	// A field that changes sampling changes the answer, seed fixed.
	base := ts.ask(t, with(map[string]any{"seed": 7, "temperature": 0.8}))
	for _, f := range []map[string]any{
		{"top_k": 20}, {"top_p": 0.9}, {"min_p": 0.1}, {"presence_penalty": 0.5},
		{"frequency_penalty": 0.5}, {"repetition_penalty": 1.05}, {"temperature": 0.7},
	} {
		fields := map[string]any{"seed": 7, "temperature": 0.8}
		maps.Copy(fields, f)
		if r := ts.ask(t, with(fields)); r.text() == base.text() {
			t.Errorf("%v did not change the answer", f)
		}
	}

	// No seed and a temperature: a new answer each time.
	random := map[string]string{}
	for range 3 {
		random[ts.ask(t, with(map[string]any{"temperature": 0.8})).text()] = ""
	}
	if len(random) != 3 {
		t.Errorf("3 requests without a seed at temperature 0.8 gave %d different answers, want 3", len(random))
	}
}

func TestStreamedAndWholeAnswersAgree(t *testing.T) {
	for _, field := range allFields {
		t.Run(field, func(t *testing.T) {
			ts := startServer(t, fast(field))
			body := map[string]any{"messages": userMessages("agree"), "seed": 3, "temperature": 1.0,
				"top_k": 40, "return_token_ids": true}
			whole, streamed := ts.ask(t, body), ts.askStream(t, body)
			if whole.text() != streamed.text() || whole.finish != streamed.finish || whole.usage != streamed.usage {
				t.Errorf("streamed and whole answers differ:\n%+v\n%+v", whole, streamed)
			}
			if !slices.Equal(whole.ids, streamed.ids) || !slices.Equal(whole.promptIDs, streamed.promptIDs) {
				t.Errorf("token ids differ:\n%v %v\n%v %v", whole.promptIDs, whole.ids, streamed.promptIDs, streamed.ids)
			}
		})
	}
}

func TestReasoningContentChangesAnswer(t *testing.T) {
	ts := startServer(t, fast(ReasoningFieldReasoning))
	const thought = "Two and two make four, so the answer is 4."
	conv := func(key, reasoning string) map[string]any {
		assistant := map[string]any{"role": "assistant", "content": "4"}
		if key != "" {
			assistant[key] = reasoning
		}
		return map[string]any{"messages": []any{
			map[string]any{"role": "user", "content": "2+2?"}, assistant,
			map[string]any{"role": "user", "content": "and 3+3?"},
		}}
	}
	without, with := ts.ask(t, conv("", "")), ts.ask(t, conv("reasoning_content", thought))
	if without.text() == with.text() {
		t.Error("reasoning_content of an earlier turn did not change the answer")
	}
	if d := with.usage.PromptTokens - without.usage.PromptTokens; d != textTokens(thought) {
		t.Errorf("reasoning_content added %d prompt tokens, want %d", d, textTokens(thought))
	}
	if again := ts.ask(t, conv("reasoning_content", thought)); again.text() != with.text() {
		t.Error("the same context with reasoning gave two answers")
	}
	if alias := ts.ask(t, conv("reasoning", thought)); alias.text() != with.text() {
		t.Error("reasoning and reasoning_content on a message answer differently")
	}
	if other := ts.ask(t, conv("reasoning_content", thought+" ")); other.text() == with.text() {
		t.Error("a different reasoning_content gave the same answer")
	}
	// Empty reasoning is no reasoning.
	if empty := ts.ask(t, conv("reasoning_content", "")); empty.text() != without.text() {
		t.Error("empty reasoning_content changed the answer")
	}
}

// wordsStartingBefore counts the words of text (each followed by a
// space) that start before byte end.
func wordsStartingBefore(text string, end int) int {
	return strings.Count(text[:end-1], " ") + 1
}

func TestStop(t *testing.T) {
	for _, field := range allFields {
		t.Run(field, func(t *testing.T) {
			ts := startServer(t, fast(field))
			base := map[string]any{"messages": userMessages("stop me"), "seed": 9, "return_token_ids": true}
			full := ts.ask(t, base)
			a := ts.predict(t, base)
			content := full.content
			if field == ReasoningFieldThink {
				_, content = splitThink(t, content)
			}
			if len(content) < 40 {
				t.Fatalf("content too short to cut: %q", content)
			}
			cases := map[string][]string{
				"a word":             {strings.Fields(content)[3]},
				"inside a word":      {content[17:19]},
				"across words":       {content[8:20]},
				"at a space":         {content[strings.IndexByte(content[5:], ' ')+5:][:3]},
				"first completes":    {content[10:30], content[20:25]},
				"absent, then found": {"zzz", content[12:16]},
			}
			for name, stop := range cases {
				t.Run(name, func(t *testing.T) {
					body := maps.Clone(base)
					body["stop"] = stop
					start, end := -1, -1
					for _, s := range stop {
						if i := strings.Index(content, s); i >= 0 && (end < 0 || i+len(s) < end) {
							start, end = i, i+len(s)
						}
					}
					for _, r := range []reply{ts.ask(t, body), ts.askStream(t, body)} {
						got := r.content
						if field == ReasoningFieldThink {
							var reasoning string
							reasoning, got = splitThink(t, got)
							r.reasoning = reasoning
						}
						if got != content[:start] {
							t.Errorf("content %q, want %q", got, content[:start])
						}
						if r.reasoning != full.reasoning && field != ReasoningFieldThink {
							t.Errorf("stop changed the reasoning")
						}
						want := a.reasoning + wordsStartingBefore(content, end)
						if r.finish != finishStop || r.usage.CompletionTokens != want || len(r.ids) != want {
							t.Errorf("finish %q, %d tokens, %d ids, want stop and %d", r.finish, r.usage.CompletionTokens, len(r.ids), want)
						}
						if !slices.Equal(r.ids, full.ids[:len(r.ids)]) {
							t.Errorf("ids are not those of the answer without stop")
						}
					}
				})
			}
			// A stop string only in the reasoning leaves the content whole.
			body := maps.Clone(base)
			if field != ReasoningFieldThink {
				body["stop"] = []string{strings.Fields(full.reasoning)[0]}
				if r := ts.ask(t, body); r.text() != full.text() || r.usage != full.usage {
					t.Errorf("a stop string of the reasoning cut the answer")
				}
			}
			// max_tokens before the stop completes: cut by length, no stop.
			body = maps.Clone(base)
			body["stop"] = []string{content[30:40]}
			body["max_tokens"] = a.reasoning + wordsStartingBefore(content, 32) - 1
			r := ts.ask(t, body)
			if r.finish != finishLength || r.usage.CompletionTokens != body["max_tokens"] || !strings.HasPrefix(full.content, r.content) {
				t.Errorf("cut before the stop: %+v", r)
			}
		})
	}
}

func TestReasoningEffort(t *testing.T) {
	cfg := fast(ReasoningFieldReasoning).WithDefaults()
	m := userMessages("effort")
	for effort, f := range effortFactors {
		sp := defaultSampling
		sp.effort = f
		for i := range 20 {
			h := promptHash(m, int64(i))
			base := cfg.planAnswer(h, &defaultSampling, 1<<20)
			a := cfg.planAnswer(h, &sp, 1<<20)
			if want := int(math.Round(float64(base.reasoning) * f)); a.reasoning != want {
				t.Errorf("%s: %d reasoning tokens, want %d (%v of %d)", effort, a.reasoning, want, f, base.reasoning)
			}
			if a.tokens-a.reasoning != base.tokens-base.reasoning {
				t.Errorf("%s: content of %d tokens, want %d", effort, a.tokens-a.reasoning, base.tokens-base.reasoning)
			}
		}
	}

	ts := startServer(t, fast(ReasoningFieldReasoning))
	sum := map[string]int{}
	for i := range 30 {
		for effort := range effortFactors {
			body := map[string]any{"messages": userMessages(fmt.Sprint("effort ", i)), "reasoning_effort": effort}
			r := ts.ask(t, body)
			want := ts.predict(t, body)
			if words := len(strings.Fields(r.reasoning)); words != want.reasoning {
				t.Errorf("%s: %d reasoning words, want %d", effort, words, want.reasoning)
			}
			sum[effort] += want.reasoning
		}
	}
	if !(sum["minimal"] < sum["low"] && sum["low"] < sum["medium"] && sum["medium"] < sum["high"]) {
		t.Errorf("reasoning tokens by effort over 30 prompts: %v", sum)
	}
}

func TestThinkingOff(t *testing.T) {
	for _, field := range allFields {
		ts := startServer(t, fast(field))
		for _, kwargs := range []map[string]any{{"enable_thinking": false}, {"thinking": false, "other": 1}} {
			body := map[string]any{"messages": userMessages("no thinking"), "chat_template_kwargs": kwargs}
			for _, r := range []reply{ts.ask(t, body), ts.askStream(t, body)} {
				if r.reasoning != "" || strings.Contains(r.content, thinkOpen) || strings.Contains(r.content, thinkClose) {
					t.Errorf("%s %v: reasoning %q, content %.40q", field, kwargs, r.reasoning, r.content)
				}
				in, out := countWords(r.content, contentWords)
				if out != 0 || in != r.usage.CompletionTokens || in == 0 {
					t.Errorf("%s %v: %d content words, %d others, %d tokens", field, kwargs, in, out, r.usage.CompletionTokens)
				}
			}
		}
		on := ts.ask(t, map[string]any{"messages": userMessages("thinking"), "chat_template_kwargs": map[string]any{"enable_thinking": true}})
		if field != ReasoningFieldThink && on.reasoning == "" {
			t.Errorf("%s: enable_thinking true gave no reasoning", field)
		}
	}
}

func TestTokenIDs(t *testing.T) {
	for _, field := range allFields {
		t.Run(field, func(t *testing.T) {
			ts := startServer(t, fast(field))
			messages := []Message{
				{Role: "system", Content: "Be brief."},
				{Role: "user", Content: "2+2?"},
				{Role: "assistant", Content: "4", ReasoningContent: "simple sum"},
				{Role: "user", Content: "and 3+3?"},
			}
			for name, extra := range map[string]map[string]any{
				"whole answer": {},
				"max_tokens":   {"max_tokens": 7},
				"stop":         {"stop": []string{"lorem", "ipsum", "dolor"}},
				"thinking off": {"chat_template_kwargs": map[string]any{"enable_thinking": false}},
			} {
				body := map[string]any{"messages": messages, "return_token_ids": true}
				maps.Copy(body, extra)
				for _, r := range []reply{ts.ask(t, body), ts.askStream(t, body)} {
					if len(r.ids) != r.usage.CompletionTokens || len(r.promptIDs) != r.usage.PromptTokens {
						t.Errorf("%s: %d ids for %d tokens, %d prompt ids for %d prompt tokens",
							name, len(r.ids), r.usage.CompletionTokens, len(r.promptIDs), r.usage.PromptTokens)
					}
					if !slices.Equal(r.promptIDs, promptTokenIDs(messages)) {
						t.Errorf("%s: prompt ids %v", name, r.promptIDs)
					}
					// Each word's id is its place in its list.
					words := strings.Fields(strings.NewReplacer(thinkOpen, "", thinkClose, " ").Replace(r.reasoning + " " + r.content))
					for i, w := range words[:min(len(words), len(r.ids))] {
						id := r.ids[i]
						var list []string
						if id >= contentIDBase {
							list, id = contentWords, id-contentIDBase
						} else {
							list, id = reasoningWords, id-reasoningIDBase
						}
						if id < 0 || id >= len(list) || !strings.HasPrefix(list[id], w) {
							t.Errorf("%s: token %d is %q, id %d", name, i, w, r.ids[i])
							break
						}
					}
				}
			}
			// Without return_token_ids no ids are sent.
			body := map[string]any{"messages": messages}
			for _, r := range []reply{ts.ask(t, body), ts.askStream(t, body)} {
				if r.hasIDs {
					t.Errorf("token ids sent unasked: %+v", r)
				}
			}
		})
	}
}

package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParamsFromJSON(t *testing.T) {
	p, err := ParamsFromJSON([]byte(`{"top_k": 20, "min_p": 0.05, "stop": "END", "seed": 7, "max_completion_tokens": 100,
		"chat_template_kwargs": {"thinking": true, "a": [1, 2]}, "n": 1, "ignore_eos": false, "temperature": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if *p.TopK != 20 || *p.MinP != 0.05 || p.Stop[0] != "END" || *p.Seed != 7 || p.MaxTokens != 100 || p.Temperature != nil {
		t.Fatalf("fields: %+v", p)
	}
	if string(p.ChatTemplateKwargs) != `{"a":[1,2],"thinking":true}` || string(p.ExtraBody) != `{"ignore_eos":false}` {
		t.Fatalf("objects: %s %s", p.ChatTemplateKwargs, p.ExtraBody)
	}
	for in, want := range map[string]string{
		`{"top_k": "x"}`:              "params.top_k: expected an integer",
		`{"model": "m"}`:              `"model"`,
		`{"n": 2}`:                    "--samples",
		`{"stream": true}`:            `"stream"`,
		`{"top_p": 2}`:                "top_p is 2",
		`{"chat_template_kwargs": 3}`: "must be a JSON object",
		`[1]`:                         "JSON object",
		`{"reasoning_effort": "max"}`: "reasoning_effort",
	} {
		if _, err := ParamsFromJSON([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParamsFromJSON(%s) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestParamsOverrideAndSample(t *testing.T) {
	seven, one := int64(7), 1.0
	run := Params{MaxTokens: 10, Seed: &seven, ChatTemplateKwargs: json.RawMessage(`{"a":1,"b":2}`), Stop: []string{"x"}}
	got := run.Override(Params{Temperature: &one, ChatTemplateKwargs: json.RawMessage(`{"b":3}`)})
	if got.MaxTokens != 10 || *got.Temperature != 1 || string(got.ChatTemplateKwargs) != `{"a":1,"b":3}` || got.Stop[0] != "x" {
		t.Fatalf("override: %+v %s", got, got.ChatTemplateKwargs)
	}
	if s := got.ForSample(2); *s.Seed != 9 || *got.Seed != 7 {
		t.Fatalf("ForSample changed the wrong seed: %d %d", *s.Seed, *got.Seed)
	}
	if (Params{}).ForSample(3).Seed != nil {
		t.Fatal("ForSample invented a seed")
	}
}

func TestParamsMsgpackRoundTrip(t *testing.T) {
	k := 5
	r := &Result{Run: "r", ID: "x", Sample: 2, Turns: 3, Params: Params{TopK: &k, ExtraBody: json.RawMessage(`{"a":1}`), Stop: []string{"s"}},
		Messages: []Message{{Role: "assistant", Content: "c", Reasoning: "r", Usage: &Usage{PromptTokens: 1, CompletionTokens: 2}, TokenIDs: []int{4, 5}}}}
	b, err := EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeResult(b)
	if err != nil {
		t.Fatal(err)
	}
	if *got.Params.TopK != 5 || string(got.Params.ExtraBody) != `{"a":1}` || got.Sample != 2 || got.Turns != 3 ||
		got.Messages[0].Usage.CompletionTokens != 2 || got.Messages[0].TokenIDs[1] != 5 {
		t.Fatalf("round trip: %+v", got)
	}
	tb, err := EncodeTurn(&Turn{Run: "r", ID: "x", Index: 1, Answer: Message{Role: "assistant", Content: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if tt, err := DecodeTurn(tb); err != nil || tt.Index != 1 || tt.Answer.Content != "a" {
		t.Fatalf("turn round trip: %+v %v", tt, err)
	}
}

func TestUnitToken(t *testing.T) {
	if (Unit{ID: "a"}).Token() != SubjectToken("a") {
		t.Fatal("sample 0 must keep the prompt's token")
	}
	seen := map[string]bool{}
	for _, u := range []Unit{{"a", 0}, {"a", 1}, {"a", 2}, {"b", 1}} {
		tok := u.Token()
		if seen[tok] || len(tok) != 32 {
			t.Fatalf("token %q of %+v is repeated or malformed", tok, u)
		}
		seen[tok] = true
	}
	if TurnSlots([]Message{{Role: "user"}, {Role: "assistant"}, {Role: "user"}}) != 2 {
		t.Fatal("TurnSlots")
	}
}

func TestManifestObjectsComeBackCanonical(t *testing.T) {
	m := &Manifest{Run: "r", Params: Params{ChatTemplateKwargs: json.RawMessage(`{"b":1,"a":{"y":2,"x":1}}`)}}
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Params.ChatTemplateKwargs) != `{"a":{"x":1,"y":2},"b":1}` {
		t.Fatalf("chat_template_kwargs came back as %s", got.Params.ChatTemplateKwargs)
	}
}

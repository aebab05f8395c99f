package dataset

import (
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// The request lines of OpenAI's Batch guide, as a batch input file holds
// them.
const (
	batchLine1 = `{"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-3.5-turbo-0125", "messages": [{"role": "system", "content": "You are a helpful assistant."},{"role": "user", "content": "Hello world!"}],"max_tokens": 1000}}`
	batchLine2 = `{"custom_id": "request-2", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-3.5-turbo-0125", "messages": [{"role": "system", "content": "You are an unhelpful assistant."},{"role": "user", "content": "Hello world!"}],"max_tokens": 1000}}`
)

func TestBatchLine(t *testing.T) {
	for _, opts := range []ParseOptions{{}, {Model: "gpt-3.5-turbo-0125"}, {Model: "gpt-3.5-turbo-0125", Turns: schema.TurnsAll}} {
		l, err := ParseLineWith([]byte(batchLine1), opts)
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		want := []schema.Message{system("You are a helpful assistant."), user("Hello world!")}
		if l.ID != "request-1" || l.Derived || !sameMessages(l.Messages, want) {
			t.Errorf("%+v: got %+v", opts, l)
		}
		if l.Params == nil || l.Params.MaxTokens != 1000 {
			t.Errorf("%+v: params %+v, want max_tokens 1000", opts, l.Params)
		}
	}
	if id, _, err := ParseLine([]byte(batchLine2)); err != nil || id != "request-2" {
		t.Errorf("ParseLine: %q %v", id, err)
	}
}

// Every body key but model and messages is a parameter of the prompt:
// max_completion_tokens is max_tokens, unknown keys go to the extra body.
func TestBatchLineParams(t *testing.T) {
	line := `{"custom_id":"r","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"old"}],` +
		`"max_completion_tokens":64,"temperature":0.3,"top_k":20,"stop":"END","n":1,"chat_template_kwargs":{"enable_thinking":false},"min_tokens":5}}`
	l, err := ParseLineWith([]byte(line), ParseOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	p := l.Params
	if p == nil || p.MaxTokens != 64 || p.Temperature == nil || *p.Temperature != 0.3 || p.TopK == nil || *p.TopK != 20 ||
		len(p.Stop) != 1 || p.Stop[0] != "END" || !strings.Contains(string(p.ChatTemplateKwargs), "enable_thinking") ||
		!strings.Contains(string(p.ExtraBody), `"min_tokens":5`) {
		t.Errorf("params %s", paramsText(p))
	}
	if !sameMessages(l.Messages, []schema.Message{user("q")}) {
		t.Errorf("messages %+v: the final assistant answer is the one regenerated", l.Messages)
	}
	// A body of model and messages alone has no params.
	l, err = ParseLineWith([]byte(`{"custom_id":"r","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"q"}]}}`), ParseOptions{})
	if err != nil || l.Params != nil {
		t.Errorf("no params: %+v %v", l.Params, err)
	}
}

func TestBatchLineErrors(t *testing.T) {
	body := `"body":{"model":"gpt-3.5-turbo-0125","messages":[{"role":"user","content":"q"}]}`
	for _, tc := range []struct{ name, line, reason string }{
		{"wrong model", strings.Replace(batchLine1, "max_tokens", "seed", 1), ""},
		{"other model", `{"custom_id":"r","method":"POST","url":"/v1/chat/completions","body":{"model":"other","messages":[{"role":"user","content":"q"}]}}`,
			`body.model is "other" but the run's model is "gpt-3.5-turbo-0125"`},
		{"embeddings url", `{"custom_id":"r","method":"POST","url":"/v1/embeddings",` + body + `}`, `url is "/v1/embeddings": aerie regenerates chat completions, so the url must be "/v1/chat/completions"`},
		{"completions url", `{"custom_id":"r","method":"POST","url":"/v1/completions",` + body + `}`, `url is "/v1/completions"`},
		{"no url", `{"custom_id":"r","method":"POST",` + body + `}`, "no url"},
		{"GET", `{"custom_id":"r","method":"GET","url":"/v1/chat/completions",` + body + `}`, `method is "GET": an OpenAI Batch line must be a POST`},
		{"empty custom_id", `{"custom_id":"","method":"POST","url":"/v1/chat/completions",` + body + `}`, "custom_id: id is an empty string"},
		{"no messages", `{"custom_id":"r","url":"/v1/chat/completions","body":{"model":"gpt-3.5-turbo-0125"}}`, "body has no messages"},
		{"bad messages", `{"custom_id":"r","url":"/v1/chat/completions","body":{"messages":[{"role":"assistant","content":"a"}]}}`, "no user message"},
		{"stream", `{"custom_id":"r","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"q"}],"stream":true}}`, `params sets "stream"`},
		{"n", `{"custom_id":"r","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"q"}],"n":4}}`, `params sets "n"`},
		{"bad param", `{"custom_id":"r","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"q"}],"temperature":"hot"}}`, "params.temperature"},
		{"body not object", `{"custom_id":"r","url":"/v1/chat/completions","body":"x"}`, "body must be an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseLineWith([]byte(tc.line), ParseOptions{Model: "gpt-3.5-turbo-0125"})
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %v, want it to contain %q", err, tc.reason)
			}
		})
	}
}

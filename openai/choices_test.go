package openai

import (
	"strings"
	"testing"
)

// manyStream is a stream of two interleaved answers as vLLM sends them
// for n=2: one choice per chunk, running usage counting that answer's
// tokens, and a last usage chunk with every answer's.
const manyStream = `data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}

data: {"id":"c","choices":[{"index":1,"delta":{"role":"assistant","content":""}}]}

data: {"id":"c","choices":[{"index":0,"delta":{"reasoning":"think a"},"token_ids":[1]}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}

data: {"id":"c","choices":[{"index":1,"delta":{"reasoning":"think b"},"token_ids":[2]}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}

data: {"id":"c","choices":[{"index":1,"delta":{"content":"B!"},"finish_reason":"length","token_ids":[3,4]}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}

data: {"id":"c","choices":[{"index":0,"delta":{"content":"A."},"finish_reason":"stop","token_ids":[5]}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}

data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}

data: [DONE]

`

func TestChatStreamSeveralAnswers(t *testing.T) {
	c, _ := newTestServer(t, rawStream(manyStream))
	req := userMessage("two please")
	req.N = 2
	progress := 0
	comp, err := c.ChatStream(testContext(t), req, func(n int) { progress += n })
	if err != nil {
		t.Fatal(err)
	}
	if len(comp.Choices) != 2 {
		t.Fatalf("%d choices, want 2", len(comp.Choices))
	}
	a, b := comp.Choices[0], comp.Choices[1]
	if a.Reasoning != "think a" || a.Content != "A." || a.FinishReason != "stop" || a.CompletionTokens != 2 || len(a.TokenIDs) != 2 {
		t.Errorf("answer 0: %+v", a)
	}
	if b.Reasoning != "think b" || b.Content != "B!" || b.FinishReason != "length" || b.CompletionTokens != 3 || len(b.TokenIDs) != 3 {
		t.Errorf("answer 1: %+v", b)
	}
	if comp.Content != "A." || comp.FinishReason != "stop" || comp.Usage.CompletionTokens != 5 || comp.Usage.PromptTokens != 5 {
		t.Errorf("completion: content %q, finish %q, usage %+v", comp.Content, comp.FinishReason, comp.Usage)
	}
	if progress != 5 {
		t.Errorf("progress counted %d tokens, want 5", progress)
	}
}

// A server that ignores n streams one answer: the caller sees one choice.
func TestChatStreamServerIgnoresN(t *testing.T) {
	c, _ := newTestServer(t, streamOf(chunk{role: true}, chunk{field: "content", text: "only", finish: "stop"}))
	req := userMessage("two please")
	req.N = 2
	comp, err := c.ChatStream(testContext(t), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(comp.Choices) != 1 || comp.Content != "only" {
		t.Errorf("choices %+v, content %q: want the one answer", comp.Choices, comp.Content)
	}
}

// An answer that never finishes fails the stream, as a single one does.
func TestChatStreamSeveralAnswersOneUnfinished(t *testing.T) {
	cut := strings.Replace(manyStream, `"finish_reason":"length",`, "", 1)
	c, _ := newTestServer(t, rawStream(cut))
	req := userMessage("two please")
	req.N = 2
	if _, err := c.ChatStream(testContext(t), req, nil); err == nil || !strings.Contains(err.Error(), "no finish_reason for answer 1") {
		t.Errorf("err %v, want answer 1 unfinished", err)
	}
}

func TestChatRequestN(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, ""}, {1, ""}, {3, `"n":3`}} {
		req := userMessage("x")
		req.N = tc.n
		b, err := req.encode(true, Dialect{})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"n":`); got != (tc.want != "") || tc.want != "" && !strings.Contains(string(b), tc.want) {
			t.Errorf("n=%d: body %s", tc.n, b)
		}
	}
	req := userMessage("x")
	req.N = MaxN + 1
	if _, err := req.encode(true, Dialect{}); err == nil {
		t.Errorf("n=%d accepted", MaxN+1)
	}
}

package openai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/aerie-dev/aerie/openai"
)

// A stand-in for vLLM that streams one short answer with reasoning.
func fakeServer() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, data := range []string{
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"reasoning":"2 and 2 make 4."}}],"usage":{"prompt_tokens":9,"completion_tokens":6,"total_tokens":15}}`,
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"4"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":7,"total_tokens":16}}`,
			`{"id":"c1","model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":7,"total_tokens":16}}`,
			`[DONE]`,
		} {
			_, _ = io.WriteString(w, "data: "+data+"\n\n")
		}
	}))
}

func ExampleClient_ChatStream() {
	srv := fakeServer()
	defer srv.Close()

	client, err := openai.New(openai.Config{BaseURL: srv.URL + "/v1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	tokens := 0
	comp, err := client.ChatStream(context.Background(), openai.ChatRequest{
		Model:    "m",
		Messages: []openai.Message{{Role: "user", Content: "2+2?"}},
	}, func(n int) { tokens += n })

	switch openai.Classify(err) {
	case 0:
		fmt.Printf("reasoning %q, content %q, finish %s, %d tokens (%d seen streaming)\n",
			comp.Reasoning, comp.Content, comp.FinishReason, comp.Usage.CompletionTokens, tokens)
	case openai.Transient:
		fmt.Println("retry later:", err)
	case openai.Permanent:
		fmt.Println("dead-letter the prompt:", err)
	case openai.Auth:
		fmt.Println("stop and fix the configuration:", err)
	case openai.Canceled:
		fmt.Println("shutting down")
	}
	// Output:
	// reasoning "2 and 2 make 4.", content "4", finish stop, 7 tokens (7 seen streaming)
}

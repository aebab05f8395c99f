package openai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

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

// A client that reads its key from a file picks up a rotated key without
// a restart: a worker paused on Auth errors reloads the file until the
// key changes, then resumes.
func ExampleClient_ReloadAPIKey() {
	dir, err := os.MkdirTemp("", "aerie-key")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "api-key")
	if err := os.WriteFile(keyFile, []byte("sk-old\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	client, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:8000", APIKeyFile: keyFile})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The operator rotates the key: a new file renamed over the old one,
	// so that no reload sees it half written.
	if err := os.WriteFile(keyFile+".new", []byte("sk-new\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	if err := os.Rename(keyFile+".new", keyFile); err != nil {
		fmt.Println(err)
		return
	}
	changed, err := client.ReloadAPIKey()
	fmt.Println("changed:", changed, "error:", err)
	changed, err = client.ReloadAPIKey()
	fmt.Println("changed:", changed, "error:", err)
	// Output:
	// changed: true error: <nil>
	// changed: false error: <nil>
}

package worker

import (
	"context"
	"testing"

	"github.com/aerie-dev/aerie/openai"
)

// urlBackend is a backend that only says where it sends requests.
type urlBackend string

func (u urlBackend) BaseURL() string { return string(u) }
func (urlBackend) ChatStream(context.Context, openai.ChatRequest, openai.Progress) (*openai.Completion, error) {
	return nil, nil
}

func TestBackendLabelDropsCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":                          "http://127.0.0.1:8000",
		"https://user:secret@gpu-a:8000/v1?key=sk-123#x": "https://gpu-a:8000/v1",
		"not a url at all":                               "",
		"":                                               "",
	} {
		if got := backendLabel(urlBackend(in)); got != want {
			t.Errorf("backendLabel(%q) = %q, want %q", in, got, want)
		}
	}
	if got := backendLabel(nil); got != "" {
		t.Errorf("backendLabel(nil) = %q, want empty", got)
	}
}

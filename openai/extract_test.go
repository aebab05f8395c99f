package openai

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A server that read another prompt, or answers without the file's
// path, is not taken at its word.
func TestExtractChecksTheReply(t *testing.T) {
	for _, c := range []struct {
		name, reply string
		want        error
		says        string
	}{
		{"another prompt", `{"choices":[{"prompt_token_ids":[1,2,9]}],"kv_transfer_params":{"hidden_states_path":"/x"}}`, ErrPromptMismatch, "first difference at 2 (3 sent, 9 read)"},
		{"no prompt ids", `{"choices":[{}],"kv_transfer_params":{"hidden_states_path":"/x"}}`, ErrPromptMismatch, "3 sent, 0 read back"},
		{"no path", `{"choices":[{"prompt_token_ids":[1,2,3]}]}`, ErrNoExtraction, "extract_hidden_states"},
		{"no choices", `{"choices":[]}`, errMalformed, "no choices"},
	} {
		var sent string
		client, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			sent = r.URL.Path + " " + string(b)
			io.WriteString(w, c.reply)
		})
		_, err := client.Extract(context.Background(), "m", []int64{1, 2, 3})
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
		if !strings.Contains(sent, "/v1/completions") || !strings.Contains(sent, `"prompt":[1,2,3]`) || !strings.Contains(sent, `"max_tokens":1`) || !strings.Contains(sent, `"return_token_ids":true`) {
			t.Errorf("%s: sent %s", c.name, sent)
		}
	}
	client, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"choices":[{"prompt_token_ids":[1,2,3]}],"kv_transfer_params":{"handle":"/data/h.safetensors"}}`)
	})
	if x, err := client.Extract(context.Background(), "m", []int64{1, 2, 3}); err != nil || x.Path != "/data/h.safetensors" {
		t.Errorf("a connector's handle: %+v, %v", x, err)
	}
}

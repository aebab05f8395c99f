//go:build unix

package simulator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/hiddenstates"
)

// completions posts body to /v1/completions and returns the status and
// the decoded reply.
func (ts *testServer) completions(t *testing.T, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(ts.url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("reply %s: %v", raw, err)
	}
	return resp.StatusCode, out
}

// The extraction protocol as speculators' client uses it: a prompt of
// token ids, max_tokens 1, return_token_ids; the reply gives the prompt's
// ids back and the file's path, and the file, once its lock is let go,
// holds hiddenstates.Synthetic of every token, position, layer id and
// dimension, exactly.
func TestCompletionsExtractHiddenStates(t *testing.T) {
	dir := t.TempDir()
	layers := []int{1, 3, 5}
	ts := startServer(t, Config{Speed: 1000, HiddenStatesPath: dir, HiddenLayerIDs: layers, HiddenSize: 64})
	ids := []int64{151, 9, 7, 3, 20000, 5}
	status, out := ts.completions(t, map[string]any{"model": DefaultModel, "prompt": ids, "max_tokens": 1, "return_token_ids": true})
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, out)
	}
	choice := out["choices"].([]any)[0].(map[string]any)
	var got []int64
	for _, v := range choice["prompt_token_ids"].([]any) {
		got = append(got, int64(v.(float64)))
	}
	if !slices.Equal(got, ids) || choice["finish_reason"] != "length" || out["object"] != "text_completion" {
		t.Errorf("reply %v", out)
	}
	path, _ := out["kv_transfer_params"].(map[string]any)["hidden_states_path"].(string)
	if filepath.Dir(path) != dir || !strings.HasSuffix(path, ".safetensors") {
		t.Fatalf("hidden_states_path %q, want a file in %s", path, dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release, err := hiddenstates.WaitWritten(ctx, path, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hiddenstates.Verify(bytes.NewReader(file), hiddenstates.Want{TokenIDs: ids, Layers: 3, Hidden: 64, DType: "BF16"}); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if _, err := hiddenstates.Encode(&want, ids, 3, 64, "BF16", func(tok int64, pos, layer, h int) float32 {
		return hiddenstates.Synthetic(tok, pos, layers[layer], h)
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, want.Bytes()) {
		t.Errorf("the file (%d bytes) is not the synthetic states of its tokens (%d bytes)", len(file), want.Len())
	}
}

// Without a storage path /v1/completions answers and writes nothing.
func TestCompletionsWithoutExtraction(t *testing.T) {
	ts := startServer(t, Config{Speed: 1000})
	status, out := ts.completions(t, map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 2})
	if status != http.StatusOK || out["kv_transfer_params"] != nil {
		t.Fatalf("status %d, reply %v", status, out)
	}
	if u := out["usage"].(map[string]any); u["prompt_tokens"] != 3.0 || u["completion_tokens"] != 2.0 {
		t.Errorf("usage %v", u)
	}
}

// A prompt that is not token ids, an id outside the vocabulary and a
// prompt too long for the context are refused as vLLM refuses them.
func TestCompletionsRefusals(t *testing.T) {
	ts := startServer(t, Config{Speed: 1000, MaxModelLen: 10, VocabSize: 100, HiddenStatesPath: t.TempDir()})
	for _, c := range []struct {
		body map[string]any
		says string
	}{
		{map[string]any{"prompt": "text"}, "prompt of token ids"},
		{map[string]any{"prompt": []int{1, 100}}, "Token id 100 is out of vocabulary"},
		{map[string]any{"prompt": []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, "max_tokens": 2}, "maximum context length is 10 tokens"},
		{map[string]any{"prompt": []int{1}, "max_tokens": 0}, "max_tokens must be at least 1"},
	} {
		status, out := ts.completions(t, c.body)
		msg, _ := json.Marshal(out)
		if status != http.StatusBadRequest || !strings.Contains(string(msg), c.says) {
			t.Errorf("%v: status %d, %s; want 400 saying %q", c.body, status, msg, c.says)
		}
	}
}

// Each file fault spoils the file as it says, and hiddenstates.Verify
// (or the wait for the lock) catches it.
func TestFileFaults(t *testing.T) {
	ids := []int64{5, 6, 7, 8, 9, 10, 11, 12}
	want := hiddenstates.Want{TokenIDs: ids, Layers: 2, Hidden: 16, DType: "BF16"}
	for _, c := range []struct {
		name   string
		faults FileFaults
		says   string
	}{
		{"missing", FileFaults{Missing: 1}, "no such file"},
		{"cut", FileFaults{Cut: 1}, "cut short"},
		{"NaN", FileFaults{NaN: 1}, "is not finite"},
		{"other tokens", FileFaults{OtherTokens: 1}, "the file is another request's"},
		{"slow lock", FileFaults{SlowLock: 1, SlowLockFor: time.Hour}, "still holds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ts := startServer(t, Config{Speed: 1000, HiddenStatesPath: dir, HiddenLayerIDs: []int{1, 2}, HiddenSize: 16, FileFaults: c.faults})
			status, out := ts.completions(t, map[string]any{"prompt": ids, "max_tokens": 1, "return_token_ids": true})
			if status != http.StatusOK {
				t.Fatalf("status %d: %v", status, out)
			}
			path := out["kv_transfer_params"].(map[string]any)["hidden_states_path"].(string)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			release, err := hiddenstates.WaitWritten(ctx, path, 5*time.Millisecond)
			if err == nil {
				defer release()
				f, oerr := os.Open(path)
				if err = oerr; err == nil {
					_, err = hiddenstates.Verify(f, want)
					f.Close()
				}
			}
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: %v, want an error saying %q", c.name, err, c.says)
			}
		})
	}
}

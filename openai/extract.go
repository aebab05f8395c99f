package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Why an extraction's answer cannot be used, besides the API's own
// errors. They are exported so that a caller can tell a server set up
// without extraction (the operator's to fix) from one that extracted
// another prompt (the attempt's: ask again, elsewhere).
var (
	// ErrNoExtraction: the server answered without kv_transfer_params, so
	// it extracts nothing. vLLM extracts with --speculative-config
	// '{"method": "extract_hidden_states", ...}' and a --kv-transfer-config
	// naming its hidden-states connector.
	ErrNoExtraction = errors.New("the server extracts no hidden states: start vLLM with --speculative-config '{\"method\": \"extract_hidden_states\", \"num_speculative_tokens\": 1, ...}' and --kv-transfer-config for its hidden-states connector")
	// ErrPromptMismatch: the prompt the server read is not the one sent,
	// so its file holds another prompt's states.
	ErrPromptMismatch = errors.New("the server's prompt token ids are not those sent")
)

// Extraction is what a server said of one extraction request.
type Extraction struct {
	// Path is the file the server's hidden-states connector writes,
	// after the reply, beside its lock (kv_transfer_params'
	// hidden_states_path).
	Path string
	// Latency is from sending the request to reading the reply.
	Latency time.Duration
	// Fingerprint is the reply's system_fingerprint.
	Fingerprint string
}

// Extract asks the server for the hidden states of a prompt of token ids,
// as speculators' extraction client does: POST /v1/completions with the
// ids, max_tokens 1 and return_token_ids. It checks that the server read
// that prompt (an ErrPromptMismatch otherwise) and returns where the file
// goes; an answer without the file's path is an ErrNoExtraction. The
// server writes the file after it answers: a caller waits on its lock
// before reading it. Time limits are Chat's.
func (c *Client) Extract(ctx context.Context, model string, ids []int64) (*Extraction, error) {
	k := c.startChat(ctx)
	k.where = "hidden-states extraction to " + c.ep.completions
	k.n = 1
	defer k.finish()
	body, err := json.Marshal(map[string]any{"model": model, "prompt": ids, "max_tokens": 1, "return_token_ids": true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", k.where, errInvalidRequest, err)
	}
	begin := time.Now()
	resp, err := k.send(http.MethodPost, c.ep.completions, body)
	if err != nil {
		return nil, err
	}
	k.dog.admit(afterHeaders)
	defer k.release(resp.Body, true)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s: %w", k.where, readAPIError(resp, c.keys.secrets()))
	}
	raw, err := readBounded(resp.Body, maxResponseBody)
	if err != nil {
		return nil, k.fail("reading response", err)
	}
	var r struct {
		Choices []struct {
			PromptTokenIDs []int64 `json:"prompt_token_ids"`
		} `json:"choices"`
		KVTransferParams  map[string]any `json:"kv_transfer_params"`
		SystemFingerprint string         `json:"system_fingerprint"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", k.where, errMalformed, err)
	}
	if len(r.Choices) == 0 {
		return nil, fmt.Errorf("%s: %w: no choices", k.where, errMalformed)
	}
	if got := r.Choices[0].PromptTokenIDs; !slices.Equal(got, ids) {
		return nil, fmt.Errorf("%s: %w: %d sent, %d read back%s", k.where, ErrPromptMismatch, len(ids), len(got), firstDiff(ids, got))
	}
	path, _ := r.KVTransferParams["hidden_states_path"].(string)
	if path == "" {
		// speculators also takes a connector's "handle".
		path, _ = r.KVTransferParams["handle"].(string)
	}
	if path == "" {
		return nil, fmt.Errorf("%s: %w", k.where, ErrNoExtraction)
	}
	return &Extraction{Path: path, Latency: time.Since(begin), Fingerprint: r.SystemFingerprint}, nil
}

// firstDiff says where two lists of ids first differ, for an error.
func firstDiff(a, b []int64) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf(", the first difference at %d (%d sent, %d read)", i, a[i], b[i])
		}
	}
	return ""
}

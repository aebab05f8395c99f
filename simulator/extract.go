package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/aerie-dev/aerie/hiddenstates"
	"github.com/aerie-dev/aerie/schema"
)

// defaultCompletionTokens is vLLM's max_tokens of a /v1/completions
// request that gives none.
const defaultCompletionTokens = 16

// completionRequest is what the simulator reads of a /v1/completions
// request: a prompt of token ids, as speculators' extraction client
// sends it.
type completionRequest struct {
	Model          string          `json:"model"`
	Prompt         json.RawMessage `json:"prompt"`
	MaxTokens      *int            `json:"max_tokens"`
	ReturnTokenIDs bool            `json:"return_token_ids"`
	Stream         bool            `json:"stream"`
}

// textCompletion is vLLM's /v1/completions response, with the hidden
// states' path in kv_transfer_params when the server extracts them.
type textCompletion struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	Created           int64          `json:"created"`
	Model             string         `json:"model"`
	SystemFingerprint string         `json:"system_fingerprint"`
	Choices           []textChoice   `json:"choices"`
	Usage             *usage         `json:"usage"`
	KVTransferParams  map[string]any `json:"kv_transfer_params,omitempty"`
}

type textChoice struct {
	Index          int       `json:"index"`
	Text           string    `json:"text"`
	Logprobs       *struct{} `json:"logprobs"`
	FinishReason   string    `json:"finish_reason"`
	StopReason     *string   `json:"stop_reason"`
	PromptTokenIDs []int64   `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int     `json:"token_ids,omitempty"`
}

// handleCompletions answers /v1/completions for a prompt of token ids.
// With Config.HiddenStatesPath set it also extracts the prompt's hidden
// states as vLLM's extract_hidden_states method with its hidden-states
// connector does: the lock beside the file is taken before the reply,
// which names the file, and the file is written after it, the lock
// released once it is whole.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	outage := s.outages.watch()
	req, ids, rerr := s.parseCompletion(w, r)
	if rerr != nil {
		writeError(w, rerr.status, rerr.param, rerr.message)
		return
	}
	maxTokens := defaultCompletionTokens
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	var key []byte
	for _, id := range ids {
		key = strconv.AppendInt(append(key, ','), id, 10)
	}
	key64 := mix64(fnv(key) ^ uint64(s.cfg.Seed))
	a := s.cfg.planAnswer(key64, &defaultSampling, maxTokens)
	seq := newSequence(len(ids), a)
	if err := s.eng.submit(seq); err != nil {
		writeError(w, http.StatusServiceUnavailable, "", "The engine is not running.")
		return
	}
	select {
	case <-seq.done:
	case <-r.Context().Done():
		s.eng.cancel(seq)
		s.left(outage)
		return
	case <-outage:
		s.eng.cancel(seq)
		s.cut(w, false)
		return
	}
	if seq.err != nil {
		writeError(w, http.StatusServiceUnavailable, "", "The engine stopped before the request finished.")
		return
	}
	id := fmt.Sprintf("cmpl-%016x%016x", rand.Uint64(), rand.Uint64())
	resp := textCompletion{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: s.model.get(),
		SystemFingerprint: schema.SimulatedFingerprint, Usage: makeUsage(len(ids), a.tokens)}
	text := append(appendReasoning(nil, a, 0, a.tokens, true), appendContent(nil, a, 0, a.tokens, true)...)
	c := textChoice{Text: string(text), FinishReason: a.finishReason}
	if req.ReturnTokenIDs {
		c.PromptTokenIDs = ids
		c.TokenIDs = appendTokenIDs(make([]int, 0, a.tokens), a, 0, a.tokens)
	}
	resp.Choices = []textChoice{c}
	if s.cfg.HiddenStatesPath == "" {
		writeJSON(w, http.StatusOK, resp)
		return
	}
	path := filepath.Join(s.cfg.HiddenStatesPath, id+".safetensors")
	lock, err := lockExclusive(hiddenstates.LockName(path))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "", fmt.Sprintf("hidden states connector: %v", err))
		return
	}
	resp.KVTransferParams = map[string]any{"hidden_states_path": path}
	fault, at := s.files.draw(key64)
	writeJSON(w, http.StatusOK, resp)
	go s.writeHiddenStates(path, ids, lock, fault, at)
}

// writeHiddenStates writes the hidden states of ids to path and then
// releases lock, which the reply's reader waits on; fault, drawn with
// at (uniform in [0, 1): where it strikes), spoils it.
func (s *Server) writeHiddenStates(path string, ids []int64, lock *os.File, fault fileFault, at float64) {
	defer lock.Close() // releases the lock
	switch fault {
	case fileMissing:
		return
	case fileSlowLock:
		d := s.cfg.FileFaults.SlowLockFor
		if d == 0 {
			d = time.Minute
		}
		t := time.NewTimer(time.Duration(float64(d) / s.cfg.Speed))
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.stopping:
			return
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return // as the connector, which only logs: the file is missing
	}
	layers := s.cfg.HiddenLayerIDs
	value := func(tok int64, pos, layer, h int) float32 { return hiddenstates.Synthetic(tok, pos, layers[layer], h) }
	written, spot := ids, int(at*float64(len(ids)))
	switch fault {
	case fileNaN:
		good := value
		value = func(tok int64, pos, layer, h int) float32 {
			if pos == spot && layer == 0 && h == 0 {
				return float32(math.NaN())
			}
			return good(tok, pos, layer, h)
		}
	case fileOtherTokens:
		written = slices.Clone(ids)
		written[spot]++
		value = func(_ int64, pos, layer, h int) float32 {
			return hiddenstates.Synthetic(ids[pos], pos, layers[layer], h)
		}
	}
	n, err := hiddenstates.Encode(f, written, len(layers), s.cfg.HiddenSize, s.cfg.HiddenDType, value)
	if err == nil && fault == fileCut {
		err = f.Truncate(int64(float64(n) * (0.1 + 0.8*at)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
}

// parseCompletion reads and checks a /v1/completions request: the
// prompt must be token ids within the vocabulary, and fit the context
// with its max_tokens.
func (s *Server) parseCompletion(w http.ResponseWriter, r *http.Request) (completionRequest, []int64, *requestError) {
	var req completionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return req, nil, badRequest("", "Request body is larger than %d bytes.", tooBig.Limit)
		}
		return req, nil, badRequest("", "Invalid JSON in request body: %v", err)
	}
	if req.Model != "" && req.Model != s.model.get() {
		s.counts.add(faultModelNotFound)
		return req, nil, modelNotFound(req.Model)
	}
	if req.Stream {
		return req, nil, badRequest("stream", "This simulator answers /v1/completions without streaming.")
	}
	var ids []int64
	if err := json.Unmarshal(req.Prompt, &ids); err != nil || len(ids) == 0 {
		return req, nil, badRequest("prompt", "This simulator's /v1/completions takes a prompt of token ids: a non-empty list of integers.")
	}
	for _, id := range ids {
		if id < 0 || id >= int64(s.cfg.VocabSize) {
			return req, nil, badRequest("prompt", "Token id %d is out of vocabulary", id)
		}
	}
	if req.MaxTokens != nil && *req.MaxTokens < 1 {
		return req, nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d.", *req.MaxTokens)
	}
	limit := req.MaxTokens
	if limit == nil {
		n := defaultCompletionTokens
		limit = &n
	}
	if len(ids)+*limit > s.cfg.MaxModelLen {
		return req, nil, contextLengthError(s.cfg.MaxModelLen, len(ids), limit)
	}
	return req, ids, nil
}

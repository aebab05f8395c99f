package worker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeLLM is an OpenAI-compatible test server that streams a fixed answer
// and records what it was asked.
type fakeLLM struct {
	// hold, if not nil, keeps every request waiting until it is closed
	// (or the client goes away).
	hold chan struct{}
	// status, if set, gives the HTTP status of the n-th request (from 1)
	// for a prompt; 200 streams an answer.
	status func(prompt string, n int) int
	// duration spreads the answer's tokens over this long, one token a
	// step; tokens, when set, is how many tokens instead. step is the
	// time between two tokens (default 50 ms).
	duration time.Duration
	tokens   int
	step     time.Duration
	// stall, if set, keeps the n-th request (from 1) for a prompt waiting
	// after its first token until the client goes away.
	stall func(prompt string, n int) bool
	// down, while set, makes the server answer everything, /health
	// included, with 503, as a vLLM server that lost its engine.
	down atomic.Bool
	// truncateBelow, if set, answers requests whose max_tokens is below
	// it with finish_reason "length".
	truncateBelow int
	// onMaxTokens sees every request's max_tokens.
	onMaxTokens func(int)
	// abort, if set, ends the n-th request (from 1) for a prompt with
	// finish_reason "abort", as vLLM ends a request its engine aborted.
	abort func(prompt string, n int) bool
	// streamError, if set, makes the n-th request (from 1) for a prompt
	// fail in the middle of its stream the way vLLM reports an engine
	// failure: an error event with code 400, then [DONE].
	streamError func(prompt string, n int) bool
	// sick, while set, answers chat requests with 500 and /health with
	// 503, as a server whose engine is failing.
	sick atomic.Bool
	// key, when set, is the API key every /v1 request must carry; others
	// get vLLM's 401. model, when set, is the served model name
	// (default "test-model"); a request for another gets vLLM's 404.
	key, model atomic.Pointer[string]
	// tokenIDs, while set, returns token ids as vLLM does with
	// return_token_ids: the prompt's in the first chunk, each token's
	// with it.
	tokenIDs atomic.Bool

	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	requests    map[string]int
}

func newFakeLLM(t *testing.T, f *fakeLLM) (*fakeLLM, string) {
	f.requests = map[string]int{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeLLM) snapshot() (inFlight, maxInFlight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight, f.maxInFlight
}

func (f *fakeLLM) count(prompt string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[prompt]
}

// total is the number of chat requests made so far, for every prompt.
func (f *fakeLLM) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.requests {
		n += c
	}
	return n
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.down.Load() {
		http.Error(w, `{"error":{"message":"engine dead","type":"ServiceUnavailableError","code":503}}`, http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path == "/health" {
		if f.sick.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		return // 200, empty body, as vLLM
	}
	if key := f.key.Load(); key != nil && r.Header.Get("Authorization") != "Bearer "+*key {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error": "Unauthorized"}`) // vLLM's answer with --api-key
		return
	}
	served := "test-model"
	if m := f.model.Load(); m != nil {
		served = *m
	}
	if r.URL.Path == "/v1/models" {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","max_model_len":8192}]}`, served)
		return
	}
	var req struct {
		Model     string                     `json:"model"`
		Messages  []struct{ Content string } `json:"messages"`
		MaxTokens int                        `json:"max_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request","type":"BadRequestError","code":400}}`, 400)
		return
	}
	if req.Model != served {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"message":"The model `+"`%s`"+` does not exist.","type":"NotFoundError","param":"model","code":404}}`, req.Model)
		return
	}
	if f.sick.Load() {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"message":"EngineCore encountered an issue","type":"InternalServerError","param":null,"code":500}}`)
		return
	}
	prompt := req.Messages[len(req.Messages)-1].Content
	if f.onMaxTokens != nil {
		f.onMaxTokens(req.MaxTokens)
	}
	finish := "stop"
	if req.MaxTokens > 0 && req.MaxTokens < f.truncateBelow {
		finish = "length"
	}
	f.mu.Lock()
	f.requests[prompt]++
	n := f.requests[prompt]
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()

	if f.hold != nil {
		select {
		case <-f.hold:
		case <-r.Context().Done():
			return
		}
	}
	if f.status != nil {
		if s := f.status(prompt, n); s != 200 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s)
			fmt.Fprintf(w, `{"error":{"message":"status %d for test","type":"TestError","code":%d}}`, s, s)
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(v string) {
		fmt.Fprintf(w, "data: %s\n\n", v)
		fl.Flush()
	}
	ids := ""
	if f.tokenIDs.Load() {
		ids = `,"token_ids":[7]`
		send(`{"id":"c1","object":"chat.completion.chunk","model":"test-model","prompt_token_ids":[1,2,3,4,5],"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
	} else {
		send(`{"id":"c1","object":"chat.completion.chunk","model":"test-model","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
	}
	if f.streamError != nil && f.streamError(prompt, n) {
		send(`{"id":"c1","object":"chat.completion.chunk","model":"test-model","choices":[{"index":0,"delta":{"reasoning":"think "}}]}`)
		send(`{"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.", "type": "BadRequestError", "param": null, "code": 400}}`)
		send("[DONE]")
		return
	}
	if f.abort != nil && f.abort(prompt, n) {
		finish = "abort"
	}
	tokens := 0
	step := f.step
	if step <= 0 {
		step = 50 * time.Millisecond
	}
	steps := 1
	if f.tokens > 0 {
		steps = f.tokens
	} else if f.duration > 0 {
		steps = int(f.duration / step)
	}
	for i := range steps {
		if i == 1 && f.stall != nil && f.stall(prompt, n) {
			<-r.Context().Done()
			return
		}
		if i > 0 {
			select {
			case <-time.After(step):
			case <-r.Context().Done():
				return
			}
		}
		tokens++
		send(`{"id":"c1","object":"chat.completion.chunk","model":"test-model","choices":[{"index":0,"delta":{"reasoning":"think "}` + ids + `}]}`)
	}
	tokens++
	send(`{"id":"c1","object":"chat.completion.chunk","model":"test-model","choices":[{"index":0,"delta":{"content":"answer to ` + prompt + `"},"finish_reason":"` + finish + `"` + ids + `}]}`)
	send(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","model":"test-model","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`, tokens, tokens+5))
	send("[DONE]")
}

package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// chatServer is an OpenAI-compatible test server that keeps the body of
// every chat request and answers each with text derived from its last
// message: reasoning "R(<last>)" and content "A(<last>)", so that a test
// can tell which answer went into which context.
type chatServer struct {
	// reply, if set, is asked how to answer a request before it is
	// answered; it may block until ctx (the request's) ends.
	reply func(ctx context.Context, r *chatRequest) chatReply

	mu          sync.Mutex
	requests    []*chatRequest
	count       map[string]int
	inFlight    int
	maxInFlight int
}

// chatRequest is one request as the server received it.
type chatRequest struct {
	Body     map[string]any
	Messages []chatMessage
	// Last is the content of the last message; N counts the requests
	// with that last message so far, from 1.
	Last string
	N    int
}

type chatMessage struct {
	Role             string  `json:"role"`
	Content          string  `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
}

// chatReply says how to answer: Status other than 0 or 200 is an error
// response; Finish is the finish reason ("stop" when empty).
type chatReply struct {
	Status int
	Finish string
}

func newChatServer(t *testing.T, s *chatServer) (*chatServer, string) {
	s.count = map[string]int{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// sent returns the requests received so far, in order.
func (s *chatServer) sent() []*chatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*chatRequest(nil), s.requests...)
}

// asked returns how many requests ended with the message last.
func (s *chatServer) asked(last string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[last]
}

func (s *chatServer) most() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInFlight
}

func (s *chatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"test-model","object":"model","max_model_len":8192}]}`)
		return
	}
	req := &chatRequest{}
	var wire struct {
		Messages []chatMessage `json:"messages"`
	}
	body, err := io.ReadAll(r.Body)
	if err != nil || json.Unmarshal(body, &req.Body) != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"BadRequestError","code":400}}`, 400)
		return
	}
	if err := json.Unmarshal(body, &wire); err != nil || len(wire.Messages) == 0 {
		http.Error(w, `{"error":{"message":"no messages","type":"BadRequestError","code":400}}`, 400)
		return
	}
	req.Messages = wire.Messages
	req.Last = wire.Messages[len(wire.Messages)-1].Content
	s.mu.Lock()
	s.count[req.Last]++
	req.N = s.count[req.Last]
	s.requests = append(s.requests, req)
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()

	reply := chatReply{}
	if s.reply != nil {
		reply = s.reply(r.Context(), req)
	}
	if r.Context().Err() != nil {
		return
	}
	if reply.Status != 0 && reply.Status != 200 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(reply.Status)
		fmt.Fprintf(w, `{"error":{"message":"status %d for test","type":"TestError","code":%d}}`, reply.Status, reply.Status)
		return
	}
	if reply.Finish == "" {
		reply.Finish = "stop"
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "c1", "object": "chat.completion.chunk", "model": "test-model",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	first := chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	reasoning := chunk(map[string]any{"reasoning": "R(" + req.Last + ")"}, nil)
	content := chunk(map[string]any{"content": "A(" + req.Last + ")"}, reply.Finish)
	if req.Body["return_token_ids"] == true {
		// vLLM's return_token_ids: the prompt's with the first chunk,
		// each chunk's own with its choice.
		first["prompt_token_ids"] = []int{len(req.Messages), 1, 2}
		reasoning["choices"].([]any)[0].(map[string]any)["token_ids"] = []int{7}
		content["choices"].([]any)[0].(map[string]any)["token_ids"] = []int{8, 9}
	}
	send(first)
	send(reasoning)
	send(content)
	prompt := 10 * len(req.Messages)
	send(map[string]any{"id": "c1", "object": "chat.completion.chunk", "model": "test-model", "choices": []any{},
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}})
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// conversation returns a prompt of turns assistant turns: a system
// message, then "u<i> <id>" user messages with assistant placeholders
// between them.
func conversation(id string, turns int) schema.Prompt {
	msgs := []schema.Message{{Role: "system", Content: "sys " + id}}
	for i := 1; i <= turns; i++ {
		if i > 1 {
			msgs = append(msgs, schema.Message{Role: "assistant"})
		}
		msgs = append(msgs, schema.Message{Role: "user", Content: fmt.Sprintf("u%d %s", i, id)})
	}
	return schema.Prompt{ID: id, Messages: msgs}
}

// setupUnits is setupRun for prompts that may carry samples and their
// own parameters: each is queued on its unit's subject, as the producer
// does.
func setupUnits(t *testing.T, m schema.Manifest, prompts []schema.Prompt, opts provision.Options) *bundle {
	t.Helper()
	srv, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := provision.WorkersConsumer(ctx, js, m.Run, opts); err != nil {
		t.Fatal(err)
	}
	brokertest.Queue(t, js, m, prompts)
	return &bundle{srv: srv, js: js, run: m.Run}
}

// unitResults returns the stored results by unit key, failing on a
// second result for any unit.
func (b *bundle) unitResults(t *testing.T) map[string]*schema.Result {
	t.Helper()
	out := map[string]*schema.Result{}
	for _, data := range b.stored(t, schema.ResultsStream) {
		r, err := schema.DecodeResult(data)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[r.Unit().Key()]; dup {
			t.Fatalf("two results for %s sample %d", r.ID, r.Sample)
		}
		out[r.Unit().Key()] = r
	}
	return out
}

// storedTurns returns the turns in the turns stream.
func (b *bundle) storedTurns(t *testing.T) []*schema.Turn {
	t.Helper()
	var out []*schema.Turn
	for _, data := range b.stored(t, schema.TurnsStream) {
		turn, err := schema.DecodeTurn(data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, turn)
	}
	return out
}

// lastMessage returns the stored message on subject in stream, or nil.
func (b *bundle) lastMessage(t *testing.T, stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return nil
	}
	return m
}

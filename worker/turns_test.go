package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

func ptr[T any](v T) *T { return &v }

// Every parameter in force for a unit reaches the backend under its
// request name: the run's, a prompt's own (its template arguments and
// extra body merged key by key into the run's), a replay's max_tokens,
// and the seed plus the sample. The result records them.
func TestEffectiveParamsReachTheBackend(t *testing.T) {
	m := schema.Manifest{Run: "params", Samples: 2, ReturnTokenIDs: true, Params: schema.Params{
		MaxTokens: 50, Temperature: ptr(0.7), TopP: ptr(0.9), TopK: ptr(20), MinP: ptr(0.05),
		PresencePenalty: ptr(0.1), FrequencyPenalty: ptr(0.2), RepetitionPenalty: ptr(1.1), Seed: ptr(int64(100)),
		Stop: []string{"END"}, ReasoningEffort: "low",
		ChatTemplateKwargs: json.RawMessage(`{"a":1,"enable_thinking":true}`),
		ExtraBody:          json.RawMessage(`{"foo":"bar"}`),
	}}
	prompt := func(id string, sample int, own *schema.Params, maxTokens int) schema.Prompt {
		return schema.Prompt{ID: id, Sample: sample, Params: own, MaxTokens: maxTokens,
			Messages: []schema.Message{{Role: "user", Content: "question " + id}}}
	}
	prompts := []schema.Prompt{
		prompt("plain", 0, nil, 0),
		prompt("plain", 1, nil, 0),
		prompt("own", 0, &schema.Params{Temperature: ptr(0.2), Stop: []string{"STOP"},
			ChatTemplateKwargs: json.RawMessage(`{"enable_thinking":false}`), ExtraBody: json.RawMessage(`{"baz":2}`)}, 0),
		prompt("replay", 1, &schema.Params{MaxTokens: 60, Seed: ptr(int64(7))}, 80),
	}
	run := `"max_tokens":50,"temperature":0.7,"top_p":0.9,"top_k":20,"min_p":0.05,"presence_penalty":0.1,
		"frequency_penalty":0.2,"repetition_penalty":1.1,"stop":["END"],"reasoning_effort":"low",
		"chat_template_kwargs":{"a":1,"enable_thinking":true},"foo":"bar","return_token_ids":true,"model":"test-model"`
	want := map[string]string{ // by id and seed
		"plain/100": `{` + run + `,"seed":100}`,
		"plain/101": `{` + run + `,"seed":101}`,
		"own/100":   `{` + run + `,"seed":100,"temperature":0.2,"stop":["STOP"],"chat_template_kwargs":{"a":1,"enable_thinking":false},"baz":2}`,
		"replay/8":  `{` + run + `,"seed":8,"max_tokens":80}`,
	}
	b := setupUnits(t, m, prompts, provision.Options{})
	srv, url := newChatServer(t, &chatServer{})
	b.start(t, worker.Config{Window: 4}, url)
	b.waitSettled(t, 20*time.Second)

	reqs := srv.sent()
	if len(reqs) != len(prompts) {
		t.Fatalf("%d requests, want %d", len(reqs), len(prompts))
	}
	for _, r := range reqs {
		id := strings.TrimPrefix(r.Last, "question ")
		seed, _ := r.Body["seed"].(float64)
		key := fmt.Sprintf("%s/%d", id, int(seed))
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected request for %s with seed %v: %v", id, r.Body["seed"], r.Body)
			continue
		}
		delete(want, key)
		var fields map[string]any
		if err := json.Unmarshal([]byte(w), &fields); err != nil {
			t.Fatal(err)
		}
		for k, v := range fields {
			if !reflect.DeepEqual(r.Body[k], v) {
				t.Errorf("%s: %s = %v in the request body, want %v", key, k, r.Body[k], v)
			}
		}
	}
	for key := range want {
		t.Errorf("no request for %s", key)
	}

	res := b.unitResults(t)
	if len(res) != len(prompts) {
		t.Fatalf("%d results, want %d", len(res), len(prompts))
	}
	for _, p := range prompts {
		r := res[p.Unit().Key()]
		if r == nil {
			t.Errorf("no result for %s sample %d", p.ID, p.Sample)
			continue
		}
		if r.Sample != p.Sample || r.Turns != 1 {
			t.Errorf("%s: sample %d, turns %d; want %d and 1", p.ID, r.Sample, r.Turns, p.Sample)
		}
		if len(r.PromptTokenIDs) == 0 || len(r.TokenIDs) == 0 {
			t.Errorf("%s sample %d: token ids %v and %v, want the backend's", p.ID, p.Sample, r.PromptTokenIDs, r.TokenIDs)
		}
		msg := b.lastMessage(t, schema.ResultsStream, schema.ResultSubject(b.run, p.Unit()))
		if got, want := msg.Header.Get(schema.HeaderSample), map[bool]string{true: "1", false: ""}[p.Sample == 1]; got != want {
			t.Errorf("%s sample %d: header %s = %q, want %q", p.ID, p.Sample, schema.HeaderSample, got, want)
		}
	}
	if r := res[schema.Unit{ID: "replay", Sample: 1}.Key()]; r != nil && (r.Params.MaxTokens != 80 || r.Params.Seed == nil || *r.Params.Seed != 8 || *r.Params.Temperature != 0.7) {
		t.Errorf("replayed sample: params %+v, want max_tokens 80, seed 8 and the run's temperature", r.Params)
	}
	if r := res[schema.Unit{ID: "own"}.Key()]; r != nil && (string(r.Params.ChatTemplateKwargs) != `{"a":1,"enable_thinking":false}` || *r.Params.Temperature != 0.2) {
		t.Errorf("prompt with its own params: result params %+v", r.Params)
	}
}

// Every turn of a conversation is generated from the model's own earlier
// answers, never from the input's assistant text; the earlier answers'
// reasoning goes back only when the run keeps it. The result holds every
// turn with what the model returned with it.
func TestConversationTurns(t *testing.T) {
	for _, keep := range []bool{false, true} {
		mode := schema.ContextReasoningDrop
		if keep {
			mode = schema.ContextReasoningKeep
		}
		t.Run("reasoning-"+mode, func(t *testing.T) {
			prompts := []schema.Prompt{conversation("c1", 3), conversation("c2", 3)}
			for i := range prompts {
				for j := range prompts[i].Messages {
					if prompts[i].Messages[j].Role == "assistant" {
						prompts[i].Messages[j].Content = "ORIGINAL" // never to be sent
					}
				}
			}
			m := schema.Manifest{Run: "turns", Turns: schema.TurnsAll, ContextReasoning: mode}
			b := setupUnits(t, m, prompts, provision.Options{})
			srv, url := newChatServer(t, &chatServer{})
			w, _ := b.start(t, worker.Config{Window: 4}, url)
			b.waitSettled(t, 20*time.Second)

			reqs := srv.sent()
			if len(reqs) != 6 {
				t.Fatalf("%d requests, want 3 turns x 2 conversations", len(reqs))
			}
			for _, id := range []string{"c1", "c2"} {
				var seen []*chatRequest
				for _, r := range reqs {
					if strings.HasSuffix(r.Last, " "+id) {
						seen = append(seen, r)
					}
				}
				if len(seen) != 3 {
					t.Fatalf("%s: %d requests, want 3", id, len(seen))
				}
				want := []chatMessage{{Role: "system", Content: "sys " + id}}
				for turn, r := range seen {
					user := fmt.Sprintf("u%d %s", turn+1, id)
					if turn > 0 {
						prev := fmt.Sprintf("u%d %s", turn, id)
						answer := chatMessage{Role: "assistant", Content: "A(" + prev + ")"}
						if keep {
							answer.ReasoningContent = ptr("R(" + prev + ")")
						}
						want = append(want, answer)
					}
					want = append(want, chatMessage{Role: "user", Content: user})
					if !reflect.DeepEqual(r.Messages, want) {
						t.Errorf("%s turn %d sent %s\nwant %s", id, turn+1, show(r.Messages), show(want))
					}
				}
			}

			res := b.unitResults(t)
			for _, id := range []string{"c1", "c2"} {
				r := res[id]
				if r == nil {
					t.Fatalf("no result for %s", id)
				}
				if r.Turns != 3 || r.Content != "A(u3 "+id+")" || r.Reasoning != "R(u3 "+id+")" || r.FinishReason != "stop" || r.Truncated {
					t.Errorf("%s: turns %d, content %q, reasoning %q, finish %q, truncated %v", id, r.Turns, r.Content, r.Reasoning, r.FinishReason, r.Truncated)
				}
				// Prompt tokens are 10 per message sent: 2, 4, 6 messages.
				if r.PromptTokens != 120 || r.CompletionTokens != 9 {
					t.Errorf("%s: usage %d + %d, want the sum over turns 120 + 9", id, r.PromptTokens, r.CompletionTokens)
				}
				if len(r.Messages) != 6 {
					t.Fatalf("%s: %d messages, want the last turn's context of 6", id, len(r.Messages))
				}
				for turn, i := range []int{2, 4} {
					m := r.Messages[i]
					q := fmt.Sprintf("u%d %s", turn+1, id)
					u := schema.Usage{PromptTokens: 20 * (turn + 1), CompletionTokens: 3}
					if m.Role != "assistant" || m.Content != "A("+q+")" || m.Reasoning != "R("+q+")" || m.FinishReason != "stop" || m.Usage == nil || *m.Usage != u {
						t.Errorf("%s: turn %d in the result is %+v (usage %v)", id, turn+1, m, m.Usage)
					}
				}
				if r.Messages[5].Content != "u3 "+id || r.Attempts != 1 {
					t.Errorf("%s: last message %+v, attempts %d", id, r.Messages[5], r.Attempts)
				}
			}
			if turns := b.storedTurns(t); len(turns) != 0 {
				t.Errorf("%d stored turns left after the results were stored", len(turns))
			}
			if s := w.Stats(); s.Completed != 2 || s.MaxGenerating > 4 || s.Turns != 6 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func show(msgs []chatMessage) string {
	b, _ := json.Marshal(msgs)
	return string(b)
}

// A finished turn is durable: a worker stopped during turn 2 leaves turn
// 1 stored, and the next worker continues with turn 2, so turn 1 is
// generated once in all. While the conversation is held with a stored
// turn, heartbeats count it.
func TestConversationContinuesAfterTheWorkerStops(t *testing.T) {
	m := schema.Manifest{Run: "durable", Turns: schema.TurnsAll}
	b := setupUnits(t, m, []schema.Prompt{conversation("c1", 3)}, provision.Options{})
	var blocking sync.Mutex
	block := true
	srv, url := newChatServer(t, &chatServer{reply: func(ctx context.Context, r *chatRequest) chatReply {
		blocking.Lock()
		b := block
		blocking.Unlock()
		if b && r.Last == "u2 c1" {
			<-ctx.Done() // until the worker gives up the request
		}
		return chatReply{}
	}})
	hb := b.heartbeats(t)
	w1, stop := b.start(t, worker.Config{Window: 2, Grace: 100 * time.Millisecond, Heartbeat: 50 * time.Millisecond}, url)
	brokertest.Eventually(t, 10*time.Second, func() bool { return srv.asked("u2 c1") == 1 }, "turn 2 to be asked")
	if turns := b.storedTurns(t); len(turns) != 1 || turns[0].Index != 0 || turns[0].Answer.Content != "A(u1 c1)" {
		t.Fatalf("stored turns when turn 2 starts: %+v, want turn 1", turns)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool {
		h := hb.last()
		return h != nil && h.Worker == w1.Name() && h.InterimTurns == 1
	}, "a heartbeat counting the stored turn")
	stop()

	blocking.Lock()
	block = false
	blocking.Unlock()
	b.start(t, worker.Config{Window: 2}, url)
	b.waitSettled(t, 20*time.Second)
	if n := srv.asked("u1 c1"); n != 1 {
		t.Errorf("turn 1 was generated %d times, want once", n)
	}
	if n := srv.asked("u2 c1"); n != 2 {
		t.Errorf("turn 2 was asked %d times, want twice (cut off, then again)", n)
	}
	r := b.unitResults(t)["c1"]
	if r == nil || r.Turns != 3 || r.Attempts != 2 || r.Messages[2].Content != "A(u1 c1)" {
		t.Fatalf("result %+v, want 3 turns on the second delivery", r)
	}
	if turns := b.storedTurns(t); len(turns) != 0 {
		t.Errorf("%d stored turns left", len(turns))
	}
}

// Two deliveries of the same conversation that finish the same turn keep
// the first one stored, and the later one goes on with it.
func TestFirstStoredTurnWins(t *testing.T) {
	m := schema.Manifest{Run: "race", Turns: schema.TurnsAll}
	b := setupUnits(t, m, []schema.Prompt{conversation("c1", 2)}, provision.Options{})
	first := &schema.Turn{Run: b.run, ID: "c1", Index: 0, Worker: "other",
		Answer: schema.Message{Role: "assistant", Content: "the other answer", FinishReason: "stop", Usage: &schema.Usage{PromptTokens: 7, CompletionTokens: 5}}}
	srv, url := newChatServer(t, &chatServer{reply: func(ctx context.Context, r *chatRequest) chatReply {
		if r.Last == "u1 c1" {
			// Another delivery of the prompt stores its turn 1 while this
			// one is generating its own.
			data, err := schema.EncodeTurn(first)
			if err != nil {
				t.Error(err)
			}
			if _, err := b.js.Publish(ctx, schema.TurnSubject(b.run, schema.Unit{ID: "c1"}, 0), data); err != nil {
				t.Error(err)
			}
		}
		return chatReply{}
	}})
	b.start(t, worker.Config{Window: 2}, url)
	b.waitSettled(t, 20*time.Second)
	reqs := srv.sent()
	if len(reqs) != 2 || len(reqs[1].Messages) != 4 || reqs[1].Messages[2].Content != "the other answer" {
		t.Fatalf("turn 2 was not asked with the stored turn 1: %d requests", len(reqs))
	}
	r := b.unitResults(t)["c1"]
	if r == nil || r.Turns != 2 || r.Messages[2].Content != "the other answer" || r.PromptTokens != 7+40 {
		t.Fatalf("result %+v, want the stored turn 1 in it and its usage counted", r)
	}
}

// A delivery that finds, after storing a turn, that another delivery of
// the conversation (running at the same time after a redelivery) has
// stored its result and removed its turns stops there: it generates no
// more turns, removes the turn it stored after the removal, which nobody
// else would, and acknowledges the prompt.
func TestConversationAnsweredMeanwhileStops(t *testing.T) {
	m := schema.Manifest{Run: "answered", Turns: schema.TurnsAll}
	p := conversation("c1", 3)
	b := setupUnits(t, m, []schema.Prompt{p}, provision.Options{})
	other := &schema.Result{Run: b.run, ID: "c1", Messages: p.Messages, Content: "the other answer", FinishReason: "stop", Turns: 3, Worker: "other"}
	srv, url := newChatServer(t, &chatServer{reply: func(ctx context.Context, r *chatRequest) chatReply {
		if r.Last == "u2 c1" {
			// The other delivery finishes the conversation while this one
			// generates turn 2: it stores the result, then removes the
			// stored turns.
			data, err := schema.EncodeResult(other)
			if err != nil {
				t.Error(err)
			}
			if _, err := b.js.Publish(ctx, schema.ResultSubject(b.run, p.Unit()), data); err != nil {
				t.Error(err)
			}
			s, err := b.js.Stream(ctx, schema.TurnsStream)
			if err == nil {
				err = s.Purge(ctx, jetstream.WithPurgeSubject(schema.TurnsFilter(b.run, p.Unit())))
			}
			if err != nil {
				t.Error(err)
			}
		}
		return chatReply{}
	}})
	b.start(t, worker.Config{Window: 2}, url)
	b.waitSettled(t, 20*time.Second)
	if n := srv.asked("u3 c1"); n != 0 {
		t.Errorf("turn 3 was asked %d times after the conversation was answered", n)
	}
	if turns := b.storedTurns(t); len(turns) != 0 {
		t.Errorf("%d stored turns left: %+v", len(turns), turns)
	}
	if r := b.unitResults(t)["c1"]; r == nil || r.Worker != "other" {
		t.Errorf("result %+v, want the other delivery's", r)
	}
}

// With a window of 2, conversations of 3 turns never have more than 2
// requests at the backend at once, and all of them finish.
func TestConversationsKeepToTheWindow(t *testing.T) {
	const conversations, window = 8, 2
	var prompts []schema.Prompt
	for i := range conversations {
		prompts = append(prompts, conversation(fmt.Sprintf("c%d", i), 3))
	}
	b := setupUnits(t, schema.Manifest{Run: "window", Turns: schema.TurnsAll}, prompts, provision.Options{})
	srv, url := newChatServer(t, &chatServer{reply: func(ctx context.Context, r *chatRequest) chatReply {
		select { // long enough for requests to overlap
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		return chatReply{}
	}})
	w, _ := b.start(t, worker.Config{Window: window}, url)
	b.waitSettled(t, 60*time.Second)
	if n := len(b.unitResults(t)); n != conversations {
		t.Fatalf("%d results, want %d", n, conversations)
	}
	if n := len(srv.sent()); n != 3*conversations {
		t.Errorf("%d requests, want %d", n, 3*conversations)
	}
	if m := srv.most(); m > window {
		t.Errorf("the backend had %d requests at once, window is %d", m, window)
	}
	s := w.Stats()
	if s.MaxGenerating > window || s.MaxGenerating < 1 || s.MaxInFlight > 2*window {
		t.Errorf("stats %+v: want at most %d generating and %d held", s, window, 2*window)
	}
	t.Logf("backend most at once %d, worker max generating %d, max held %d", srv.most(), s.MaxGenerating, s.MaxInFlight)
}

// A turn cut at max_tokens under the keep policy ends the conversation
// there: the result is flagged and has the turns up to it.
func TestTruncatedTurnEndsTheConversation(t *testing.T) {
	m := schema.Manifest{Run: "keep", Turns: schema.TurnsAll, Params: schema.Params{MaxTokens: 10}}
	b := setupUnits(t, m, []schema.Prompt{conversation("c1", 3)}, provision.Options{})
	srv, url := newChatServer(t, &chatServer{reply: func(_ context.Context, r *chatRequest) chatReply {
		if r.Last == "u2 c1" {
			return chatReply{Finish: "length"}
		}
		return chatReply{}
	}})
	b.start(t, worker.Config{Window: 2}, url)
	b.waitSettled(t, 20*time.Second)
	if n := srv.asked("u3 c1"); n != 0 {
		t.Errorf("turn 3 was asked %d times after turn 2 was cut", n)
	}
	r := b.unitResults(t)["c1"]
	if r == nil || !r.Truncated || r.Turns != 2 || r.TurnsPlanned != 3 || r.FinishReason != "length" || r.Content != "A(u2 c1)" || len(r.Messages) != 4 || r.Params.MaxTokens != 10 {
		t.Fatalf("result %+v, want turn 2 cut and kept, 2 turns, its context of 4 messages", r)
	}
	if turns := b.storedTurns(t); len(turns) != 0 {
		t.Errorf("%d stored turns left", len(turns))
	}
}

// A turn that fails for good dead-letters the conversation with the
// failed turn, and the turns before it stay stored for a replay.
func TestFailedTurnIsDeadLetteredWithItsTurn(t *testing.T) {
	m := schema.Manifest{Run: "fail", Turns: schema.TurnsAll}
	p := conversation("c1", 3)
	p.Sample = 1
	p.Params = &schema.Params{Temperature: ptr(0.3)}
	m.Samples = 2
	b := setupUnits(t, m, []schema.Prompt{p}, provision.Options{})
	_, url := newChatServer(t, &chatServer{reply: func(_ context.Context, r *chatRequest) chatReply {
		if r.Last == "u2 c1" {
			return chatReply{Status: 400}
		}
		return chatReply{}
	}})
	b.start(t, worker.Config{Window: 2}, url)
	b.waitSettled(t, 20*time.Second)
	var dead []*schema.DeadLetter
	for _, data := range b.stored(t, schema.DeadStream) {
		d, err := schema.DecodeDeadLetter(data)
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, d)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d := dead[0]
	if d.Turn != 2 || d.Reason != schema.ReasonPermanent || d.Sample != 1 || d.Params == nil || *d.Params.Temperature != 0.3 || len(d.Messages) != len(p.Messages) {
		t.Errorf("dead letter %+v, want turn 2, permanent, sample 1 with its params and messages", d)
	}
	msg := b.lastMessage(t, schema.DeadStream, schema.DeadSubject(b.run, p.Unit()))
	if msg == nil || msg.Header.Get(schema.HeaderSample) != "1" {
		t.Errorf("dead letter not on its unit's subject with the sample header")
	}
	turns := b.storedTurns(t)
	if len(turns) != 1 || turns[0].Index != 0 || turns[0].Sample != 1 || turns[0].Answer.Content != "A(u1 c1)" {
		t.Errorf("stored turns %+v, want turn 1 kept", turns)
	}
	if n := b.resultCount(t); n != 0 {
		t.Errorf("%d results", n)
	}
}

// Each turn has the run's max_attempts: a stored turn clears the
// failures of the turns before it.
func TestEachTurnHasItsOwnAttempts(t *testing.T) {
	m := schema.Manifest{Run: "attempts", Turns: schema.TurnsAll, Policy: schema.Policy{MaxAttempts: 2}}
	b := setupUnits(t, m, []schema.Prompt{conversation("c1", 3)}, provision.Options{})
	srv, url := newChatServer(t, &chatServer{reply: func(_ context.Context, r *chatRequest) chatReply {
		if r.N == 1 {
			return chatReply{Status: 500} // every turn fails once
		}
		return chatReply{}
	}})
	// The breaker is kept out of it: this is about the prompt's count.
	b.start(t, worker.Config{Window: 2, RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond, BreakerThreshold: 100}, url)
	b.waitSettled(t, 20*time.Second)
	r := b.unitResults(t)["c1"]
	if r == nil || r.Turns != 3 || r.Attempts != 4 {
		t.Fatalf("result %+v, want 3 turns done on the 4th delivery", r)
	}
	if n := len(srv.sent()); n != 6 {
		t.Errorf("%d requests, want 6", n)
	}
}

package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// recordingBackend stands between the workers and the simulator and
// remembers every chat request: its body, and whether its whole answer
// reached the worker (a worker killed mid-answer cuts the connection).
type recordingBackend struct {
	url string
	sim string

	mu       sync.Mutex
	requests []recorded
	// refuse, when set, is asked about every chat request before it goes
	// to the simulator; true answers it with vLLM's 400 instead.
	refuse func(body []byte) bool
}

// doneWriter passes a response through and notes when the end of its
// stream ("data: [DONE]") is written.
type doneWriter struct {
	http.ResponseWriter
	done atomic.Bool
}

func (d *doneWriter) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("data: [DONE]")) {
		d.done.Store(true)
	}
	return d.ResponseWriter.Write(b)
}

// Flush keeps server-sent events flowing through the proxy.
func (d *doneWriter) Flush() {
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

type recorded struct {
	body      []byte
	completed bool
	// worker is the name in the URL the request came to (see
	// recordingBackend.urlFor); empty for the plain URL.
	worker         string
	started, ended time.Time
}

func newRecordingBackend(t *testing.T, simURL string) *recordingBackend {
	t.Helper()
	target, err := url.Parse(simURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1                    // server-sent events go through as they come
	proxy.ErrorLog = log.New(io.Discard, "", 0) // a killed worker's requests end in errors
	rb := &recordingBackend{sim: simURL}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started, worker := time.Now(), ""
		if name, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/"); ok && strings.HasPrefix(name, "as-") {
			worker, r.URL.Path = strings.TrimPrefix(name, "as-"), "/"+rest
		}
		if r.URL.Path != "/v1/chat/completions" {
			proxy.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		rb.mu.Lock()
		refuse := rb.refuse != nil && rb.refuse(body)
		rb.mu.Unlock()
		if refuse {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error": {"message": "refused by the test", "type": "BadRequestError", "param": null, "code": 400}}`)
		}
		dw := &doneWriter{ResponseWriter: w}
		if !refuse {
			proxy.ServeHTTP(dw, r)
		}
		// A stream whose end went out is complete even when its worker
		// was killed right after: it may have stored the turn before
		// the handler got here and saw the connection gone.
		completed := r.Context().Err() == nil || dw.done.Load()
		rb.mu.Lock()
		rb.requests = append(rb.requests, recorded{body: body, completed: completed, worker: worker, started: started, ended: time.Now()})
		rb.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	rb.url = srv.URL
	return rb
}

// urlFor is the backend's URL for a worker of that name: its requests
// are recorded with the name.
func (rb *recordingBackend) urlFor(worker string) string { return rb.url + "/as-" + worker }

func (rb *recordingBackend) recorded() []recorded {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return append([]recorded(nil), rb.requests...)
}

// conversationsFile writes n conversations of 2 or 3 user turns, half in
// the messages form and half ShareGPT style, some with a system message
// and some ending in the dataset's own final answer. Every assistant turn
// holds text that must never reach the model. It returns the number of
// turns of each conversation by id.
func conversationsFile(t *testing.T, path string, n int) map[string]int {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	turns := map[string]int{}
	for i := range n {
		id := fmt.Sprintf("c%04d", i)
		k := 2 + i%2
		turns[id] = k
		sharegpt := i%4 >= 2
		var msgs []map[string]string
		add := func(role, text string) {
			if sharegpt {
				from := map[string]string{"system": "system", "user": "human", "assistant": "gpt"}[role]
				msgs = append(msgs, map[string]string{"from": from, "value": text})
			} else {
				msgs = append(msgs, map[string]string{"role": role, "content": text})
			}
		}
		if i%3 == 0 {
			add("system", "You are terse.")
		}
		for u := range k {
			add("user", fmt.Sprintf("question %d of conversation %s: explain topic %d", u+1, id, (i*7+u)%97))
			if u < k-1 || i%5 == 0 {
				add("assistant", "DATASET ANSWER NEVER TO BE SENT "+id)
			}
		}
		field := "messages"
		if sharegpt {
			field = "conversations"
		}
		line, err := json.Marshal(map[string]any{"id": id, field: msgs})
		if err != nil {
			t.Fatal(err)
		}
		f.Write(append(line, '\n'))
	}
	return turns
}

type turnsLine struct {
	ID           string           `json:"id"`
	Sample       int              `json:"sample"`
	Messages     []schema.Message `json:"messages"`
	Reasoning    string           `json:"reasoning"`
	Content      string           `json:"content"`
	FinishReason string           `json:"finish_reason"`
	Turns        int              `json:"turns"`
	Usage        schema.Usage     `json:"usage"`
	Params       schema.Params    `json:"params"`
}

// writtenOnce returns the ids of lines, failing the test for each one
// written twice.
func writtenOnce(t *testing.T, lines []turnsLine) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, l := range lines {
		if seen[l.ID] {
			t.Errorf("%s written twice", l.ID)
		}
		seen[l.ID] = true
	}
	return seen
}

// chatContext is a request's context, as the key of the requests made
// for it.
func chatContext(msgs any) string {
	b, _ := json.Marshal(msgs)
	return string(b)
}

// TestTurnsAllSurvivesAKilledWorker regenerates 300 conversations of 2
// or 3 turns with --turns all through separate processes, kills a worker
// with SIGKILL while conversations are between turns, and then checks
// that every conversation was written once, every turn is the model's
// answer to exactly the context it was generated from (asking the
// simulator again, which answers a context and seed deterministically),
// and no turn that was finished before the kill was generated again.
func TestTurnsAllSurvivesAKilledWorker(t *testing.T) {
	bin := buildAerie(t)
	const n = 300
	dir := t.TempDir()
	prompts := filepath.Join(dir, "conversations.jsonl")
	want := conversationsFile(t, prompts, n)
	plannedTurns := 0
	for _, k := range want {
		plannedTurns += k
	}

	sim := simtest.Serve(t, simulator.Config{Speed: 400, OutputMedian: 200, MaxNumSeqs: 64})
	backend := newRecordingBackend(t, sim)
	natsAddr := freeAddr(t)
	natsURL := "nats://" + natsAddr
	data := filepath.Join(dir, "data")
	run := "turns"
	start(t, bin, "server", "--listen", natsAddr, "--store", filepath.Join(data, "nats"))
	waitTCP(t, natsAddr)

	workers := map[string]*proc{}
	work := func(name string) *proc {
		workers[name] = start(t, bin, "work", "--nats", natsURL, "--run", run, "--backend", backend.urlFor(name), "--window", "40", "--name", name, "--grace", "2s", "--log-level", "debug")
		return workers[name]
	}
	w1 := work("w1")
	work("w2")
	agg := start(t, bin, "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "500ms")
	aerie(t, bin, "produce", "--nats", natsURL, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5",
		"--turns", "all", "--seed", "11", "--temperature", "0.7", "--max-tokens", "4096", "--ack-wait", "3s").wait(t, 2*time.Minute)

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	turnsStream, err := js.Stream(ctx, schema.TurnsStream)
	if err != nil {
		t.Fatal(err)
	}
	storedTurns := func() uint64 {
		info, err := turnsStream.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}

	// Kill a worker while it holds conversations with stored turns.
	completions := filepath.Join(data, run, "completions.jsonl")
	brokertest.Eventually(t, 3*time.Minute, func() bool { return countLines(completions) >= n/5 && storedTurns() >= 10 },
		"a fifth of the conversations written and turns stored for others")
	stored := storedTurns()
	// The turns stored when the worker dies must never be generated
	// again; what was answered but not yet stored may be.
	info, err := turnsStream.Info(ctx, jetstream.WithSubjectFilter(schema.TurnsRoot+".>"))
	if err != nil {
		t.Fatal(err)
	}
	storedBefore := info.State.Subjects
	storedAt := map[string]time.Time{}
	for subject := range storedBefore {
		m, err := turnsStream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			delete(storedBefore, subject) // its conversation was written since
			continue
		}
		if err != nil {
			t.Fatalf("read stored turn %s: %v", subject, err)
		}
		storedAt[subject] = m.Time
	}
	killedAt := time.Now()
	w1.kill(t)
	t.Logf("killed worker w1 with %d conversations written and %d turns stored", countLines(completions), stored)
	work("w1-restarted")
	agg.wait(t, 5*time.Minute)

	lines := readJSONL[turnsLine](t, completions)
	seen := writtenOnce(t, lines)
	if len(lines) != n || len(seen) != n {
		t.Fatalf("completions.jsonl: %d lines, %d distinct ids, want %d", len(lines), len(seen), n)
	}

	// Every turn is the answer to its own regenerated context.
	type check struct {
		id, what                   string
		context                    []map[string]string
		wantReasoning, wantContent string
	}
	var checks []check
	turnsWritten, truncated := 0, 0
	for _, l := range lines {
		// A turn cut at max_tokens is kept and ends its conversation
		// (--on-length keep); every other conversation has all its turns.
		if (l.FinishReason == "stop" && l.Turns != want[l.ID]) || (l.FinishReason == "length" && l.Turns > want[l.ID]) || l.Turns < 1 {
			t.Errorf("%s: %d turns, finish %q; want %d turns", l.ID, l.Turns, l.FinishReason, want[l.ID])
			continue
		}
		if l.FinishReason == "length" {
			truncated++
		}
		turnsWritten += l.Turns
		var ctxMsgs []map[string]string
		turn := 0
		for _, m := range l.Messages {
			if m.Role == "assistant" {
				if strings.Contains(m.Content, "DATASET ANSWER") || m.FinishReason != "stop" || m.Usage == nil || m.Usage.CompletionTokens == 0 {
					t.Errorf("%s turn %d is not a generated answer: %+v", l.ID, turn+1, m)
				}
				checks = append(checks, check{l.ID, fmt.Sprintf("turn %d", turn+1), append([]map[string]string(nil), ctxMsgs...), m.Reasoning, m.Content})
				turn++
			}
			ctxMsgs = append(ctxMsgs, map[string]string{"role": m.Role, "content": m.Content})
		}
		checks = append(checks, check{l.ID, fmt.Sprintf("turn %d (last)", turn+1), ctxMsgs, l.Reasoning, l.Content})
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var mu sync.Mutex
	mismatches := 0
	for _, c := range checks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body, _ := json.Marshal(map[string]any{"model": "moonshotai/Kimi-K2.5", "messages": c.context, "seed": 11, "temperature": 0.7, "max_tokens": 4096})
			resp, err := http.Post(sim+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var out struct {
				Choices []struct {
					Message struct {
						Content   string `json:"content"`
						Reasoning string `json:"reasoning"`
					} `json:"message"`
				} `json:"choices"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) == 0 {
				t.Errorf("%s %s: asking the simulator again: %v (status %d)", c.id, c.what, err, resp.StatusCode)
				return
			}
			got := out.Choices[0].Message
			if got.Content != c.wantContent || got.Reasoning != c.wantReasoning {
				mu.Lock()
				mismatches++
				if mismatches <= 5 {
					t.Errorf("%s %s is not the answer to its context: written %.60q, the model answers %.60q", c.id, c.what, c.wantContent, got.Content)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	// No turn finished before the kill was generated again; the original
	// assistant text never reached the backend.
	type asked struct {
		completed int
		first     time.Time
	}
	byContext := map[string]*asked{}
	matched := map[string]bool{} // turns stored before the kill, found among the requests
	var regenerated []string
	requests := backend.recorded()
	for _, r := range requests {
		var req struct {
			Messages []map[string]any `json:"messages"`
			Seed     *int64           `json:"seed"`
		}
		if err := json.Unmarshal(r.body, &req); err != nil {
			t.Fatalf("a request body is not JSON: %v", err)
		}
		if bytes.Contains(r.body, []byte(preflightPrompt)) {
			continue // a worker checking its backend before it pulls
		}
		if bytes.Contains(r.body, []byte("DATASET ANSWER")) {
			t.Errorf("the dataset's own answer was sent: %.200s", r.body)
		}
		if req.Seed == nil || *req.Seed != 11 {
			t.Errorf("request without the run's seed: %.200s", r.body)
		}
		if !r.completed {
			continue
		}
		key := chatContext(req.Messages)
		a := byContext[key]
		if a == nil {
			a = &asked{first: r.ended}
			byContext[key] = a
		}
		subject := storedTurnSubject(run, req.Messages)
		if storedBefore[subject] > 0 {
			matched[subject] = true
		}
		a.completed++
		// A request that started after its turn was stored asked for a
		// turn already answered. One that started before may be a second
		// delivery running beside the first (a hand-back): it goes on
		// with the stored answer.
		if at, ok := storedAt[subject]; ok && r.started.After(at) {
			if m := conversationOf.FindSubmatch(r.body); m != nil {
				regenerated = append(regenerated, string(m[1]))
			}
			t.Errorf("turn %s, stored at %s (%v before the kill), was asked for again by %s at %s: %.200s",
				subject, at.Format("15:04:05.000"), killedAt.Sub(at).Round(time.Millisecond), r.worker, r.started.Format("15:04:05.000"), r.body)
		}
	}
	if len(regenerated) > 0 {
		explainRequests(t, requests, workers, regenerated, run)
	}
	// Every turn stored before the kill was asked for by some request:
	// otherwise the requests are not mapped to their turns, and the check
	// above sees nothing.
	if len(matched) != len(storedBefore) {
		t.Errorf("%d of the %d turns stored before the kill match a request's turn subject", len(matched), len(storedBefore))
		// Say which, and what was asked of their conversations, so that
		// a failure explains itself.
		for subject := range storedBefore {
			if matched[subject] {
				continue
			}
			t.Logf("unmatched: %s, stored at %s (%v before the kill)", subject, storedAt[subject].Format("15:04:05.000"), killedAt.Sub(storedAt[subject]).Round(time.Millisecond))
			for _, r := range requests {
				var req struct {
					Messages []map[string]any `json:"messages"`
				}
				if json.Unmarshal(r.body, &req) != nil {
					continue
				}
				if got := storedTurnSubject(run, req.Messages); strings.HasPrefix(got, strings.TrimRight(subject, "0123456789")) {
					t.Logf("  asked: %s by %s, %s to %s, completed %v", got, r.worker, r.started.Format("15:04:05.000"), r.ended.Format("15:04:05.000"), r.completed)
				}
			}
		}
	}
	again, latest := 0, time.Duration(0)
	for _, a := range byContext {
		if a.completed > 1 {
			again += a.completed - 1
			latest = max(latest, killedAt.Sub(a.first))
		}
	}
	// A delivery of the killed worker that stored a turn after another
	// delivery wrote the conversation (and removed its turns) leaves that
	// turn until the prompt comes back, an AckWait later, and a live
	// worker finds the result and removes it: every delivery must be
	// settled before nothing may be left.
	pending, err := js.Consumer(ctx, schema.PromptsStream, schema.WorkersConsumer(run))
	if err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, time.Minute, func() bool {
		info, err := pending.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, "every delivery of the run settled")
	if left := storedTurns(); left != 0 {
		t.Errorf("%d stored turns left behind after every conversation was written and every delivery settled", left)
	}
	t.Logf("%d conversations (%d ended early by a kept truncated turn), %d turns (planned %d), %d requests (%d cut by the kill), %d turns answered twice (answered at most %v before the kill, not yet stored; %d turns were stored then), %d turn answers checked against the simulator",
		n, truncated, turnsWritten, plannedTurns, len(requests), len(requests)-completedCount(requests), again, latest.Round(time.Millisecond), len(storedBefore), len(checks))
}

var conversationOf = regexp.MustCompile(`of conversation (c[0-9]+):`)

// storedTurnSubject is the subject under which the answer to a request
// of context msgs is stored as a turn: its conversation's id is in its
// questions, and its turn (from 0) is the number of answers before it.
func storedTurnSubject(run string, msgs []map[string]any) string {
	id, turn := "", 0
	for _, m := range msgs {
		if m["role"] == "assistant" {
			turn++
		}
		if c, ok := m["content"].(string); ok {
			if found := conversationOf.FindStringSubmatch(c); found != nil {
				id = found[1]
			}
		}
	}
	return schema.TurnSubject(run, schema.Unit{ID: id}, turn)
}

// explainRequests logs, for each conversation of ids, every request made
// for it and every line of the workers' logs that names it. It stops the
// workers first, so that their logs can be read.
func explainRequests(t *testing.T, requests []recorded, workers map[string]*proc, ids []string, run string) {
	t.Helper()
	for _, p := range workers {
		select {
		case err := <-p.done:
			p.done <- err
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			p.done <- <-p.done
		}
	}
	for _, id := range ids {
		var b strings.Builder
		fmt.Fprintf(&b, "requests for conversation %s:\n", id)
		for _, r := range requests {
			var req struct {
				Messages []map[string]any `json:"messages"`
			}
			if !bytes.Contains(r.body, []byte("of conversation "+id+":")) || json.Unmarshal(r.body, &req) != nil {
				continue
			}
			fmt.Fprintf(&b, "  %s by %s, %s to %s, completed %v\n", storedTurnSubject(run, req.Messages), r.worker,
				r.started.Format("15:04:05.000"), r.ended.Format("15:04:05.000"), r.completed)
		}
		for name, p := range workers {
			for _, line := range strings.Split(p.stderr.String(), "\n") {
				if strings.Contains(line, id) {
					fmt.Fprintf(&b, "  %s: %s\n", name, line)
				}
			}
		}
		t.Log(b.String())
	}
}

// preflightPrompt is the question a worker asks its backend before it
// pulls (doctor/checks_backend.go).
const preflightPrompt = "Reply with the single word OK."

func completedCount(rs []recorded) int {
	n := 0
	for _, r := range rs {
		if r.completed {
			n++
		}
	}
	return n
}

// TestTurnsAllReplayContinuesAfterStoredTurns refuses turn 2 of one
// conversation once (a 400: the prompt's own fault, dead-lettered at
// once), then replays it: the dead letter names turn 2, and the replayed
// conversation continues from its stored first turn, which is never
// asked again.
func TestTurnsAllReplayContinuesAfterStoredTurns(t *testing.T) {
	bin := buildAerie(t)
	const n = 8
	dir := t.TempDir()
	prompts := filepath.Join(dir, "conversations.jsonl")
	conversationsFile(t, prompts, n)
	sim := simtest.Serve(t, simulator.Config{Speed: 1000, OutputMedian: 50})
	backend := newRecordingBackend(t, sim)
	victim := "question 2 of conversation c0003"
	refused := 0
	backend.mu.Lock()
	backend.refuse = func(body []byte) bool { // called under backend.mu
		if bytes.Contains(body, []byte(victim)) && refused == 0 {
			refused++
			return true
		}
		return false
	}
	backend.mu.Unlock()
	natsAddr := freeAddr(t)
	natsURL := "nats://" + natsAddr
	data := filepath.Join(dir, "data")
	run := "replay-turns"
	start(t, bin, "server", "--listen", natsAddr, "--store", filepath.Join(data, "nats"))
	waitTCP(t, natsAddr)
	start(t, bin, "work", "--nats", natsURL, "--run", run, "--backend", backend.url, "--window", "4", "--grace", "2s")
	aggregate := func() {
		aerie(t, bin, "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "200ms").wait(t, 2*time.Minute)
	}
	aerie(t, bin, "produce", "--nats", natsURL, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5",
		"--turns", "all", "--seed", "3").wait(t, time.Minute)
	aggregate()

	failed, err := os.ReadFile(filepath.Join(data, run, "failed.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var dead struct {
		ID     string `json:"id"`
		Turn   int    `json:"turn"`
		Reason string `json:"reason"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(failed), &dead); err != nil || dead.ID != "c0003" || dead.Turn != 2 || dead.Status != 400 {
		t.Fatalf("failed.jsonl = %s (%v), want c0003 failed at turn 2 with a 400", failed, err)
	}
	if n := countLines(filepath.Join(data, run, "completions.jsonl")); n != 7 {
		t.Fatalf("%d completions before the replay, want 7", n)
	}

	aerie(t, bin, "replay", "--nats", natsURL, "--run", run).wait(t, time.Minute)
	aggregate()
	lines := readJSONL[turnsLine](t, filepath.Join(data, run, "completions.jsonl"))
	var got *turnsLine
	for i := range lines {
		if lines[i].ID == "c0003" {
			got = &lines[i]
		}
	}
	if len(lines) != n || got == nil || got.Turns != 3 {
		t.Fatalf("after the replay: %d lines, c0003 %+v; want %d lines, c0003 with 3 turns", len(lines), got, n)
	}
	if b, _ := os.ReadFile(filepath.Join(data, run, "failed.jsonl")); len(bytes.TrimSpace(b)) != 0 {
		t.Errorf("failed.jsonl after the replay: %s", b)
	}
	asked := map[int]int{}
	for _, r := range backend.recorded() {
		for turn := 1; turn <= 3; turn++ {
			last := fmt.Sprintf("question %d of conversation c0003", turn)
			if bytes.Contains(r.body, []byte(last)) && !bytes.Contains(r.body, []byte(fmt.Sprintf("question %d of conversation c0003", turn+1))) {
				asked[turn]++
			}
		}
	}
	if asked[1] != 1 || asked[2] != 2 || asked[3] != 1 {
		t.Errorf("c0003's turns were asked %v times; want turn 1 once (stored before the failure), turn 2 twice (refused, then answered), turn 3 once", asked)
	}
}

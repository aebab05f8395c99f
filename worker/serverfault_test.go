package worker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// An engine failure in the middle of a stream (vLLM's error event with
// its default code 400, then [DONE]) is the server's fault: the prompt is
// tried again and completes; nothing is dead-lettered.
func TestEngineErrorMidStreamIsRetried(t *testing.T) {
	const n = 20
	b := setup(t, n, provision.Options{})
	f, url := newFakeLLM(t, &fakeLLM{streamError: func(prompt string, n int) bool {
		return n == 1 && (strings.HasSuffix(prompt, "3") || strings.HasSuffix(prompt, "7"))
	}})
	b.start(t, worker.Config{Window: 5, RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond}, url)
	b.waitSettled(t, 30*time.Second)
	if dead := deadLetters(t, b); len(dead) != 0 {
		for id, d := range dead {
			t.Errorf("%s dead-lettered as %s: %s", id, d.Reason, d.Error)
		}
	}
	res := b.results(t)
	if len(res) != n {
		t.Fatalf("%d results, want %d", len(res), n)
	}
	for _, id := range []string{"p0003", "p0007", "p0013", "p0017"} {
		if res[id].Attempts != 2 || f.count("question "+id) != 2 {
			t.Errorf("%s: completed on delivery %d after %d requests, want the second", id, res[id].Attempts, f.count("question "+id))
		}
	}
}

// A server answering 500 to everything (its engine failing, /health 503)
// pauses the worker as 502 and 503 do, instead of spending every prompt's
// attempts: once it heals, every prompt completes and none is dead.
func TestServerErrorsPauseTheWorker(t *testing.T) {
	const n = 40
	b := setup(t, n, provision.Options{})
	f, url := newFakeLLM(t, &fakeLLM{})
	f.sick.Store(true)
	w, _ := b.start(t, worker.Config{Window: 10, RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond}, url)
	brokertest.Eventually(t, 20*time.Second, func() bool { return w.Stats().Paused > 0 }, "the worker to pause on a run of 500s")
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d prompts dead-lettered while the server was sick", len(dead))
	}
	f.sick.Store(false)
	b.waitSettled(t, 60*time.Second)
	if got := len(b.results(t)); got != n {
		t.Errorf("%d results, want %d", got, n)
	}
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d prompts dead-lettered, want none", len(dead))
	}
	s := w.Stats()
	if s.HandedBack == 0 || s.Retry > worker.DefaultBreakerThreshold {
		t.Errorf("stats %+v: want prompts handed back during the pause, and at most %d failures counted", s, worker.DefaultBreakerThreshold)
	}
}

// A backend restarted under another model name answers 404 to every
// request: that is the deployment's fault, so the worker pauses (its
// heartbeat says why) and dead-letters nothing; serving the model again
// resumes it.
func TestModelGoneMidRunPauses(t *testing.T) {
	const n = 30
	b := setup(t, n, provision.Options{})
	f, url := newFakeLLM(t, &fakeLLM{duration: 100 * time.Millisecond})
	hb := b.heartbeats(t)
	w, _ := b.start(t, worker.Config{Window: 5, Heartbeat: 50 * time.Millisecond}, url)
	brokertest.Eventually(t, 20*time.Second, func() bool { return b.resultCount(t) >= 5 }, "first results")
	other := "another-model"
	f.model.Store(&other)
	brokertest.Eventually(t, 20*time.Second, func() bool {
		h := hb.last()
		return h != nil && h.Paused && strings.Contains(h.PausedReason, "does not exist")
	}, "a heartbeat saying the worker is paused because the model is gone")
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d prompts dead-lettered while the model was not served", len(dead))
	}
	f.model.Store(nil)
	b.waitSettled(t, 60*time.Second)
	if got := len(b.results(t)); got != n {
		t.Errorf("%d results, want %d", got, n)
	}
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d prompts dead-lettered, want none", len(dead))
	}
	if w.Stats().Retry != 0 {
		t.Errorf("%d failures counted against prompts, want none", w.Stats().Retry)
	}
}

// A run that asks for token ids, against a backend that answers without
// them (vLLM before 0.10.2, another server), stores nothing without
// them: each of two workers on that backend pauses at its first such
// answer, says why in its heartbeats, hands the prompt back without
// counting it, and resumes by itself once a probe gets ids. Every stored
// answer then has them.
func TestNoTokenIDsPausesTheWorker(t *testing.T) {
	const n = 12
	b := setupRun(t, schema.Manifest{Run: "ids", ReturnTokenIDs: true}, n, provision.Options{})
	f, url := newFakeLLM(t, &fakeLLM{})
	hb := b.heartbeats(t)
	var workers []*worker.Worker
	for _, name := range []string{"w1", "w2"} {
		w, _ := b.start(t, worker.Config{Name: name, Window: 3, Heartbeat: 50 * time.Millisecond}, url)
		workers = append(workers, w)
	}
	brokertest.Eventually(t, 20*time.Second, func() bool {
		for _, name := range []string{"w1", "w2"} {
			h := hb.of(name)
			if h == nil || !h.Paused || !strings.Contains(h.PausedReason, "without the token ids the run asks for") {
				return false
			}
		}
		return true
	}, "heartbeats of both workers saying they are paused for want of token ids")
	if got := len(b.results(t)); got != 0 {
		t.Errorf("%d answers stored without token ids", got)
	}
	f.tokenIDs.Store(true)
	b.waitSettled(t, 60*time.Second)
	results := b.results(t)
	if len(results) != n {
		t.Errorf("%d results, want %d", len(results), n)
	}
	for id, r := range results {
		if len(r.PromptTokenIDs) == 0 || len(r.TokenIDs) == 0 {
			t.Errorf("%s stored without token ids", id)
		}
	}
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d prompts dead-lettered, want none", len(dead))
	}
	for _, w := range workers {
		if w.Stats().Retry != 0 {
			t.Errorf("%d failures counted against prompts, want none", w.Stats().Retry)
		}
	}
}

// heartbeatLog keeps the latest heartbeat of a run, and of each worker.
type heartbeatLog struct {
	mu       sync.Mutex
	latest   *schema.Heartbeat
	byWorker map[string]*schema.Heartbeat
}

func (h *heartbeatLog) last() *schema.Heartbeat {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest
}

// of is the latest heartbeat of the worker named name, nil before any.
func (h *heartbeatLog) of(name string) *schema.Heartbeat {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byWorker[name]
}

// workers is the number of workers heard from: those whose Run has
// looked up the streams and started.
func (h *heartbeatLog) workers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byWorker)
}

// heartbeats follows the heartbeats of the run's workers.
func (b *bundle) heartbeats(t *testing.T) *heartbeatLog {
	t.Helper()
	h := &heartbeatLog{}
	sub, err := b.js.Conn().Subscribe(schema.HeartbeatFilter(b.run), func(m *nats.Msg) {
		var hb schema.Heartbeat
		if err := json.Unmarshal(m.Data, &hb); err != nil {
			t.Errorf("undecodable heartbeat: %v", err)
			return
		}
		h.mu.Lock()
		h.latest = &hb
		if h.byWorker == nil {
			h.byWorker = map[string]*schema.Heartbeat{}
		}
		h.byWorker[hb.Worker] = &hb
		h.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return h
}

// A key rotated on the server (vLLM restarted with another --api-key)
// answers 401 to every request: the worker pauses instead of
// dead-lettering the queue, re-reads its key file while paused, and
// resumes by itself once the file holds the new key. Nothing counts
// against any prompt.
func TestRotatedKeyPausesUntilTheFileIsFixed(t *testing.T) {
	const n = 60
	b := setup(t, n, provision.Options{})
	oldKey, newKey := "key-one", "key-two"
	f, url := newFakeLLM(t, &fakeLLM{duration: 100 * time.Millisecond})
	f.key.Store(&oldKey)
	keyFile := filepath.Join(t.TempDir(), "api-key")
	if err := os.WriteFile(keyFile, []byte(oldKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hb := b.heartbeats(t)
	w, _ := b.startClient(t, worker.Config{Window: 10, Heartbeat: 50 * time.Millisecond},
		openai.Config{BaseURL: url, APIKeyFile: keyFile})
	brokertest.Eventually(t, 20*time.Second, func() bool { return b.resultCount(t) >= 10 }, "first results")

	f.key.Store(&newKey)
	brokertest.Eventually(t, 20*time.Second, func() bool {
		h := hb.last()
		return h != nil && h.Paused && strings.Contains(h.PausedReason, "401") && strings.Contains(h.PausedReason, "--api-key-file")
	}, "a heartbeat saying the worker is paused because its key is refused")
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d prompts dead-lettered while the key was refused", len(dead))
	}
	if err := os.WriteFile(keyFile, []byte(newKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.waitSettled(t, 60*time.Second)
	if got := len(b.results(t)); got != n {
		t.Errorf("%d results, want %d", got, n)
	}
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d prompts dead-lettered, want none", len(dead))
	}
	if s := w.Stats(); s.Retry != 0 || s.HandedBack == 0 {
		t.Errorf("stats %+v: want no failure counted and prompts handed back during the pause", s)
	}
}

// An answer the server ended itself (vLLM's finish_reason "abort": its
// engine aborted the request) is not stored as an answer: the prompt is
// tried again, as after a transient failure of the server, and its next
// answer kept.
func TestAbortedAnswerIsRetried(t *testing.T) {
	const n = 6
	b := setup(t, n, provision.Options{})
	_, url := newFakeLLM(t, &fakeLLM{abort: func(_ string, n int) bool { return n == 1 }})
	w, _ := b.start(t, worker.Config{Window: 3}, url)
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, n, w)
	results := b.results(t)
	if len(results) != n {
		t.Fatalf("%d results, want %d", len(results), n)
	}
	for id, r := range results {
		if r.FinishReason != "stop" {
			t.Errorf("%s stored with finish_reason %q, want the retry's stop", id, r.FinishReason)
		}
	}
	// Each first answer is a failure of the server's: retried with its
	// count, or handed back uncounted once five in a row have paused
	// the worker.
	if s := w.Stats(); s.Retry+s.HandedBack != n || s.DeadLettered != 0 {
		t.Errorf("retried %d, handed back %d, dead-lettered %d; want %d retried or handed back, none dead-lettered", s.Retry, s.HandedBack, s.DeadLettered, n)
	}
}

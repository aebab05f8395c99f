package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// resultsByRun returns the stored results by run and prompt id, failing
// on a second result for any prompt of a run.
func (b *bundle) resultsByRun(t *testing.T) map[string]map[string]*schema.Result {
	t.Helper()
	out := map[string]map[string]*schema.Result{}
	for _, data := range b.stored(t, schema.ResultsStream) {
		r, err := schema.DecodeResult(data)
		if err != nil {
			t.Fatal(err)
		}
		if out[r.Run] == nil {
			out[r.Run] = map[string]*schema.Result{}
		}
		if _, dup := out[r.Run][r.ID]; dup {
			t.Fatalf("two results for %s of run %s", r.ID, r.Run)
		}
		out[r.Run][r.ID] = r
	}
	return out
}

// settledRun waits until the workers have settled n prompts of run and
// its consumer has none left to deliver or unacknowledged.
func (b *bundle) settledRun(t *testing.T, run string, n int64, ws ...*worker.Worker) {
	t.Helper()
	rb := &bundle{js: b.js, run: run}
	brokertest.Eventually(t, 60*time.Second, func() bool {
		var got int64
		for _, w := range ws {
			s := w.Stats().Runs[run]
			got += s.Completed + s.DeadLettered + s.AlreadySettled
		}
		if got < n {
			return false
		}
		info := rb.consumer(t)
		return info.NumPending == 0 && info.NumAckPending == 0
	}, "%d prompts of run %s settled", n, run)
}

// Two workers with --all-runs serve two runs with their own parameters
// and turns modes, one of them produced after the workers started, and
// skip a run whose model their backend does not serve, saying so in a
// heartbeat of that run. Every prompt of each run is answered once,
// with its own run's max_tokens.
func TestAllRunsServesEveryRunOnce(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "pilot", Params: schema.Params{MaxTokens: 7}}, 40, provision.Options{})
	seen := map[int]int{}
	var mu sync.Mutex
	_, url := newFakeLLM(t, &fakeLLM{duration: 5 * time.Millisecond, onMaxTokens: func(n int) {
		mu.Lock()
		seen[n]++
		mu.Unlock()
	}})
	skipped := heartbeatsOf(t, b, "other")

	var ws []*worker.Worker
	for i := range 2 {
		w, _ := b.start(t, worker.Config{AllRuns: true, Name: fmt.Sprintf("w%d", i), Window: 4}, url+"/v1/")
		ws = append(ws, w)
	}
	brokertest.Eventually(t, 30*time.Second, func() bool {
		return ws[0].Stats().Completed+ws[1].Stats().Completed > 0
	}, "the workers to answer the first run")
	conv := brokertest.Prompts(20)
	for i := range conv {
		conv[i].Messages = append(conv[i].Messages, schema.Message{Role: "assistant", Content: "a"}, schema.Message{Role: "user", Content: "more"})
	}
	brokertest.Queue(t, b.js, schema.Manifest{Run: "later", Params: schema.Params{MaxTokens: 11}, Turns: schema.TurnsAll, TotalTurns: 40}, conv)
	brokertest.Queue(t, b.js, schema.Manifest{Run: "other", Model: "another-model"}, brokertest.Prompts(5))

	b.settledRun(t, "pilot", 40, ws...)
	b.settledRun(t, "later", 20, ws...)
	res := b.resultsByRun(t)
	if len(res["pilot"]) != 40 || len(res["later"]) != 20 || len(res["other"]) != 0 {
		t.Fatalf("results: pilot %d, later %d, other %d; want 40, 20, 0", len(res["pilot"]), len(res["later"]), len(res["other"]))
	}
	for _, r := range res["pilot"] {
		if r.Params.MaxTokens != 7 || r.Turns != 1 {
			t.Fatalf("pilot result %s: max_tokens %d, turns %d; want 7 and 1", r.ID, r.Params.MaxTokens, r.Turns)
		}
	}
	for _, r := range res["later"] {
		if r.Params.MaxTokens != 11 || r.Turns != 2 {
			t.Fatalf("later result %s: max_tokens %d, turns %d; want 11 and 2", r.ID, r.Params.MaxTokens, r.Turns)
		}
	}
	mu.Lock()
	if len(seen) != 2 || seen[7] != 40 || seen[11] != 40 {
		t.Errorf("requests by max_tokens %v, want 40 of 7 and 40 of 11 (two turns each)", seen)
	}
	mu.Unlock()
	select {
	case hb := <-skipped:
		if !hb.Paused || !strings.Contains(hb.PausedReason, `does not serve the run's model "another-model"`) {
			t.Errorf("heartbeat for the skipped run: paused %v, reason %q", hb.Paused, hb.PausedReason)
		}
	case <-time.After(10 * time.Second):
		t.Error("no heartbeat says the run of another model is skipped")
	}
	for _, w := range ws {
		if _, ok := w.Stats().Runs["other"]; ok {
			t.Errorf("worker %s serves the run of a model its backend does not serve", w.Name())
		}
	}
}

// --runs serves the runs named and no other.
func TestRunsServesOnlyThoseNamed(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "a"}, 10, provision.Options{})
	brokertest.Queue(t, b.js, schema.Manifest{Run: "b"}, brokertest.Prompts(10))
	brokertest.Queue(t, b.js, schema.Manifest{Run: "c"}, brokertest.Prompts(10))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := provision.WorkersConsumer(ctx, b.js, "c", provision.Options{}); err != nil {
		t.Fatal(err)
	}
	_, url := newFakeLLM(t, &fakeLLM{})
	w, _ := b.start(t, worker.Config{Runs: []string{"a", "b"}, Window: 4}, url+"/v1/")
	b.settledRun(t, "a", 10, w)
	b.settledRun(t, "b", 10, w)
	if info := (&bundle{js: b.js, run: "c"}).consumer(t); info.NumPending != 10 || info.NumAckPending != 0 {
		t.Errorf("run c: %d pending, %d delivered; want 10 and 0", info.NumPending, info.NumAckPending)
	}
	if _, ok := w.Stats().Runs["c"]; ok {
		t.Error("the worker serves run c, which it was not given")
	}
}

func TestConfigNeedsOneWayToNameRuns(t *testing.T) {
	for _, c := range []worker.Config{
		{},
		{Run: "a", AllRuns: true},
		{Run: "a", Runs: []string{"b"}},
		{Runs: []string{"a", ""}},
		{Runs: []string{"a", "b.c"}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	for _, c := range []worker.Config{{Run: "a"}, {Runs: []string{"a", "b"}}, {AllRuns: true}} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", c, err)
		}
	}
}

// requestLog records the runs of the requests a fake backend gets, in
// the order they are sent; each run is told by its max_tokens.
type requestLog struct {
	mu    sync.Mutex
	runs  map[int]string
	order []string
}

func (r *requestLog) seen(maxTokens int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.order = append(r.order, r.runs[maxTokens])
}

func (r *requestLog) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// A run of higher priority takes the slots as they free up: once its
// first request is sent, the other run gets at most the slots already
// granted to it until the last of the first run's prompts is sent.
func TestHigherPriorityTakesTheSlots(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "low", Params: schema.Params{MaxTokens: 10}}, 60, provision.Options{})
	rl := &requestLog{runs: map[int]string{10: "low", 20: "high"}}
	_, url := newFakeLLM(t, &fakeLLM{duration: 50 * time.Millisecond, onMaxTokens: rl.seen})
	w, _ := b.start(t, worker.Config{Runs: []string{"low", "high"}, Window: 4}, url+"/v1/")
	brokertest.Eventually(t, 30*time.Second, func() bool { return w.Stats().Runs["low"].Completed >= 8 }, "the low run to be under way")
	// Queued paused, then resumed: all its prompts wait from the moment
	// it may be pulled.
	brokertest.Queue(t, b.js, schema.Manifest{Run: "high", Params: schema.Params{MaxTokens: 20}, Schedule: schema.Schedule{Priority: 5, Paused: true}}, brokertest.Prompts(30))
	brokertest.Eventually(t, 10*time.Second, func() bool { _, ok := w.Stats().Runs["high"]; return ok }, "the worker to open the high run")
	resume := false
	if _, _, err := runs.SetSchedule(context.Background(), b.js, "high", runs.ScheduleChange{Paused: &resume}, runs.Options{}); err != nil {
		t.Fatal(err)
	}
	b.settledRun(t, "high", 30, w)
	b.settledRun(t, "low", 60, w)
	order := rl.snapshot()
	first, last := -1, -1
	for i, r := range order {
		if r == "high" {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	between := 0
	for _, r := range order[first:last] {
		if r == "low" {
			between++
		}
	}
	if between > 4 {
		t.Errorf("%d requests of the low run were sent while the high run had prompts waiting (between its first and last), want at most the window (4)", between)
	}
}

// Runs of equal priority share the slots by weight, counted in tokens:
// with weights 3 and 1 and answers of one length, three requests of the
// first for each of the second while both have prompts.
func TestWeightsShareTheSlots(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "big", Params: schema.Params{MaxTokens: 30}, Schedule: schema.Schedule{Weight: 3}}, 300, provision.Options{})
	brokertest.Queue(t, b.js, schema.Manifest{Run: "small", Params: schema.Params{MaxTokens: 10}}, brokertest.Prompts(300))
	rl := &requestLog{runs: map[int]string{30: "big", 10: "small"}}
	_, url := newFakeLLM(t, &fakeLLM{duration: 50 * time.Millisecond, onMaxTokens: rl.seen})
	w, _ := b.start(t, worker.Config{Runs: []string{"big", "small"}, Window: 8}, url+"/v1/")
	brokertest.Eventually(t, 60*time.Second, func() bool { return len(rl.snapshot()) >= 240 }, "240 requests")
	// Leave out the start, while the lanes open one after the other.
	order := rl.snapshot()[40:240]
	big := 0
	for _, r := range order {
		if r == "big" {
			big++
		}
	}
	if share := float64(big) / float64(len(order)); share < 0.70 || share > 0.80 {
		t.Errorf("the run of weight 3 got %.0f%% of 200 requests while both had prompts, want 75%% ± 5", 100*share)
	}
	_ = w
}

// Each run's heartbeat counts the prompts the worker holds for the other
// runs it serves (other_runs): the ETA takes only the rest of the window
// as the run's batch.
func TestHeartbeatCountsOtherRuns(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "one"}, 5, provision.Options{})
	brokertest.Queue(t, b.js, schema.Manifest{Run: "two"}, brokertest.Prompts(5))
	release := make(chan struct{})
	_, url := newFakeLLM(t, &fakeLLM{hold: release})
	var others sync.Map // run -> OtherRuns of a heartbeat that had some
	sub, err := b.js.Conn().Subscribe(schema.HeartbeatFilter("*"), func(m *nats.Msg) {
		var hb schema.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil && hb.OtherRuns > 0 {
			others.Store(hb.Run, hb.OtherRuns)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// A window larger than either run: each gets slots, and the held
	// requests keep them.
	b.start(t, worker.Config{Runs: []string{"one", "two"}, Window: 8, Heartbeat: 50 * time.Millisecond}, url+"/v1/")
	t.Cleanup(sync.OnceFunc(func() { close(release) }))
	brokertest.Eventually(t, 20*time.Second, func() bool {
		_, one := others.Load("one")
		_, two := others.Load("two")
		return one && two
	}, "a heartbeat of each run counting the prompts held for the other")
}

// A paused run keeps its prompts queued while the other is served, and
// is served once resumed.
func TestPausedRunWaitsForResume(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "a"}, 10, provision.Options{})
	brokertest.Queue(t, b.js, schema.Manifest{Run: "b", Schedule: schema.Schedule{Paused: true}}, brokertest.Prompts(10))
	_, url := newFakeLLM(t, &fakeLLM{})
	w, _ := b.start(t, worker.Config{AllRuns: true, Window: 4}, url+"/v1/")
	b.settledRun(t, "a", 10, w)
	brokertest.Eventually(t, 10*time.Second, func() bool { _, ok := w.Stats().Runs["b"]; return ok }, "the worker to open the paused run")
	if s := w.Stats().Runs["b"]; s.Completed != 0 || s.InFlight != 0 {
		t.Fatalf("the paused run was pulled: %+v", s)
	}
	if info := (&bundle{js: b.js, run: "b"}).consumer(t); info.NumPending != 10 {
		t.Fatalf("the paused run has %d prompts queued, want 10", info.NumPending)
	}
	resume := false
	if _, _, err := runs.SetSchedule(context.Background(), b.js, "b", runs.ScheduleChange{Paused: &resume}, runs.Options{}); err != nil {
		t.Fatal(err)
	}
	b.settledRun(t, "b", 10, w)
}

// A run the backend's engine cannot serve (Config.Refuse: here, token
// ids from an engine without them) is skipped by a worker of every run,
// saying why in a heartbeat of that run, and stops a worker of that one
// run before it takes a prompt; the other runs are served.
func TestEngineRefusedRunIsSkipped(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "plain"}, 10, provision.Options{})
	_, url := newFakeLLM(t, &fakeLLM{duration: time.Millisecond})
	refuse := func(m *schema.Manifest) error {
		if m.ReturnTokenIDs {
			return errors.New("TensorRT-LLM returns no token ids on chat answers")
		}
		return nil
	}
	skipped := heartbeatsOf(t, b, "ids")
	brokertest.Queue(t, b.js, schema.Manifest{Run: "ids", ReturnTokenIDs: true}, brokertest.Prompts(5))
	w, _ := b.start(t, worker.Config{AllRuns: true, Name: "w", Window: 4, Refuse: refuse}, url+"/v1/")
	b.settledRun(t, "plain", 10, w)
	select {
	case hb := <-skipped:
		if !hb.Paused || !strings.Contains(hb.PausedReason, "no token ids") {
			t.Errorf("heartbeat for the refused run: paused %v, reason %q", hb.Paused, hb.PausedReason)
		}
	case <-time.After(10 * time.Second):
		t.Error("no heartbeat says the refused run is skipped")
	}
	if res := b.resultsByRun(t); len(res["ids"]) != 0 {
		t.Fatalf("%d results of the refused run", len(res["ids"]))
	}

	client, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	one, err := worker.New(worker.Config{Run: "ids", Name: "one", Window: 4, Refuse: refuse, Logger: quiet}, b.js, client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := one.Run(ctx); err == nil || !strings.Contains(err.Error(), "no token ids") {
		t.Fatalf("a worker of the refused run: %v, want it stopped with the reason", err)
	}
}

// heartbeatsOf receives the heartbeats of run's workers until the test
// ends.
func heartbeatsOf(t *testing.T, b *bundle, run string) <-chan schema.Heartbeat {
	t.Helper()
	beats := make(chan schema.Heartbeat, 16)
	sub, err := b.js.Conn().Subscribe(schema.HeartbeatFilter(run), func(m *nats.Msg) {
		var hb schema.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil {
			select {
			case beats <- hb:
			default: // the test reads the first few
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return beats
}

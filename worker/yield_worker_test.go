package worker_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/probe"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// Two workers that yield to serving traffic, on a server without
// vLLM's priority policy, which refuses their requests' priority:
// both pause saying what to fix, and no prompt is dead-lettered or
// counted as failed.
func TestYieldWithoutPriorityPolicyPauses(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "yield", Model: simulator.DefaultModel}, 6, provision.Options{})
	url := simtest.Serve(t, simulator.Config{Speed: 100, OutputMedian: 20})
	hb := b.heartbeats(t)
	var ws []*worker.Worker
	for _, name := range []string{"w1", "w2"} {
		w, _ := b.start(t, worker.Config{Name: name, Window: 2, Heartbeat: 50 * time.Millisecond, YieldToServing: true}, url)
		ws = append(ws, w)
	}
	brokertest.Eventually(t, 20*time.Second, func() bool {
		for _, name := range []string{"w1", "w2"} {
			h := hb.of(name)
			if h == nil || !h.Paused || !strings.Contains(h.PausedReason, "--scheduling-policy priority") {
				return false
			}
		}
		return true
	}, "both workers paused for want of vLLM's priority policy")
	if dead := deadLetters(t, b); len(dead) != 0 {
		t.Errorf("%d prompts dead-lettered, want none", len(dead))
	}
	for _, w := range ws {
		if s := w.Stats(); s.Retry != 0 || s.Completed != 0 {
			t.Errorf("%s: %d failures counted, %d completed; want none", w.Name(), s.Retry, s.Completed)
		}
	}
}

// A worker that yields to serving traffic caps its window while an
// interactive load shares its server, and every prompt is still answered.
func TestYieldCapsTheWindowForServingTraffic(t *testing.T) {
	const n = 400
	b := setupRun(t, schema.Manifest{Run: "batch", Model: simulator.DefaultModel}, n, provision.Options{})
	url := simtest.Serve(t, simulator.Config{Speed: 20, MaxNumSeqs: 16, StepBase: 20 * time.Millisecond, StepPerSeq: -1, PrefillPerToken: -1,
		OutputMedian: 100, OutputSigma: 0.2, SchedulingPolicy: simulator.SchedulingPriority})
	w, _ := b.start(t, worker.Config{Window: 24, WindowPoll: 50 * time.Millisecond, YieldToServing: true}, url)
	client, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan probe.Report, 1)
	go func() {
		rep, _ := probe.Run(ctx, client, probe.Config{Rate: 20, Duration: 5 * time.Second, Model: simulator.DefaultModel})
		done <- rep
	}()
	brokertest.Eventually(t, 20*time.Second, func() bool { return w.Stats().Window < 24 }, "the window capped for the interactive load")
	if rep := <-done; rep.Failed != 0 || rep.Answered == 0 {
		t.Errorf("interactive load: %v", rep)
	}
	waitCounted(t, n, w)
	if s := w.Stats(); s.Completed != n || s.DeadLettered != 0 {
		t.Errorf("completed %d, dead-lettered %d; want %d and 0", s.Completed, s.DeadLettered, n)
	}
}

// Batch requests that the server preempts for interactive ones, under
// vLLM's priority policy with a small KV cache, resume and finish: a
// preemption is no failure, and nothing is retried or dead-lettered.
func TestPreemptedBatchRequestsFinish(t *testing.T) {
	const n = 12
	b := setupRun(t, schema.Manifest{Run: "batch", Model: simulator.DefaultModel}, n, provision.Options{})
	// Answers of 300 tokens at 10 ms a token, at twice real speed: each
	// batch request runs for a second and a half of wall time.
	url := simtest.Serve(t, simulator.Config{Speed: 2, MaxNumSeqs: 64, KVCacheTokens: 4096, MaxModelLen: 4096,
		StepBase: 10 * time.Millisecond, StepPerSeq: -1, PrefillPerToken: -1, OutputMedian: 300, OutputSigma: 0.1,
		ReasoningShare: -1, SchedulingPolicy: simulator.SchedulingPriority})
	w, _ := b.start(t, worker.Config{Window: n, YieldToServing: true, WindowPoll: time.Hour}, url)
	client, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	// The interactive requests come once every batch request is under
	// way, and need more KV cache than the batch leaves.
	brokertest.Eventually(t, 20*time.Second, func() bool { return w.Stats().MaxGenerating >= n }, "every batch request under way")
	rep, err := probe.Run(context.Background(), client, probe.Config{Rate: 40, Duration: 500 * time.Millisecond, Model: simulator.DefaultModel, MaxTokens: 300})
	if err != nil {
		t.Fatalf("interactive load: %v (%v)", err, rep)
	}
	waitCounted(t, n, w)
	if s := w.Stats(); s.Completed != n || s.Retry != 0 || s.DeadLettered != 0 {
		t.Errorf("completed %d, retried %d, dead-lettered %d; want %d, 0, 0", s.Completed, s.Retry, s.DeadLettered, n)
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^vllm:num_preemptions_total\{[^}]*\} (\S+)$`).FindSubmatch(text)
	if m == nil || string(m[1]) == "0" {
		t.Fatalf("the server preempted nothing (%q): the test needs a KV cache too small for both loads", m)
	}
}

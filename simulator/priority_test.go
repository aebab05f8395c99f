package simulator

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Under SchedulingPriority the queue is served by priority, lower first,
// then arrival: a request of priority 0 that arrives behind two of
// priority 10 is admitted before them.
func TestPriorityOrdersTheQueue(t *testing.T) {
	cfg := Config{MaxNumSeqs: 1, StepBase: 10 * time.Millisecond, StepPerSeq: -1, PrefillPerToken: -1,
		OutputMedian: 50, OutputSigma: 0.0001, ReasoningShare: -1, SchedulingPolicy: SchedulingPriority}.WithDefaults()
	e := newEngine(cfg)
	var admitted []string
	add := func(name string, priority int) *sequence {
		m := userMessages(name)
		s := newSequence(promptTokens(m), cfg.plan(m, 50))
		s.priority = priority
		e.enqueue(s)
		return s
	}
	names := map[*sequence]string{}
	names[add("first", 10)] = "first"
	e.credit += 10 * time.Millisecond
	e.advance() // first is admitted
	names[add("second", 10)] = "second"
	names[add("third", 10)] = "third"
	names[add("urgent", 0)] = "urgent"
	e.onFinish = func(s *sequence) { admitted = append(admitted, names[s]) }
	for range 1000 {
		e.credit += 10 * time.Millisecond
		e.advance()
	}
	if got := strings.Join(admitted, " "); got != "first urgent second third" {
		t.Errorf("finished in the order %q, want first urgent second third", got)
	}
}

// When the KV cache runs out under SchedulingPriority, the running
// request of the highest priority value is preempted, not the last one
// admitted; under fcfs the last admitted is.
func TestPriorityChoosesTheVictim(t *testing.T) {
	for _, c := range []struct {
		policy string
		want   string
	}{{SchedulingPriority, "batch"}, {SchedulingFCFS, "interactive"}} {
		cfg := tightKV()
		cfg.SchedulingPolicy = c.policy
		cfg = cfg.WithDefaults()
		e := newEngine(cfg)
		batch := newSequence(promptTokens(kvPrompt(0)), cfg.plan(kvPrompt(0), 700))
		batch.priority = 10
		if c.policy == SchedulingFCFS {
			batch.priority = 0
		}
		e.enqueue(batch)
		e.credit += 10 * time.Millisecond
		e.advance()
		interactive := newSequence(promptTokens(kvPrompt(1)), cfg.plan(kvPrompt(1), 700))
		e.enqueue(interactive)
		for range 1000 {
			if batch.preemptions+interactive.preemptions > 0 {
				break
			}
			e.credit += 10 * time.Millisecond
			e.advance()
			checkKV(t, e)
		}
		got := map[bool]string{true: "batch", false: "interactive"}[batch.preemptions > 0]
		if batch.preemptions+interactive.preemptions == 0 {
			t.Fatalf("%s: nothing was preempted; the test needs a full KV cache", c.policy)
		}
		if got != c.want {
			t.Errorf("%s: the %s request was preempted, want the %s one", c.policy, got, c.want)
		}
	}
}

// A request with a priority is refused, as by vLLM, unless the server
// runs the priority policy; its time to first token is on /metrics.
func TestPriorityRequestsAndTTFTMetric(t *testing.T) {
	fast := Config{Speed: 1000, OutputMedian: 20, OutputSigma: 0.1}
	ts := startServer(t, fast)
	resp, err := ts.post(context.Background(), t, map[string]any{"model": DefaultModel, "priority": 10, "max_tokens": 5,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Got priority 10 but Priority scheduling is not enabled.") {
		t.Errorf("priority under fcfs: %d %s", resp.StatusCode, body)
	}

	fast.SchedulingPolicy = SchedulingPriority
	ts = startServer(t, fast)
	for _, p := range []int{10, 0, -5} {
		resp, err := ts.post(context.Background(), t, map[string]any{"model": DefaultModel, "priority": p, "max_tokens": 5,
			"messages": []map[string]string{{"role": "user", "content": "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("priority %d: status %d", p, resp.StatusCode)
		}
	}
	resp, err = http.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`vllm:time_to_first_token_seconds_count{engine="0",model_name="` + DefaultModel + `"} 3`, `vllm:time_to_first_token_seconds_bucket{engine="0",model_name="` + DefaultModel + `",le="2560"} 3`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

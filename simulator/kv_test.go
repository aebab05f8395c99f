package simulator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// tightKV is a server with room for three prompts of 297 tokens (19
// blocks each, 57 of the cache's 64) but not for their answers, cut at
// max_tokens 700: every step takes 10ms, whatever the batch or prompt.
func tightKV() Config {
	return Config{MaxNumSeqs: 10, MaxModelLen: 1024, KVCacheTokens: 1024,
		StepBase: 10 * time.Millisecond, StepPerSeq: -1, PrefillPerToken: -1,
		OutputMedian: 5000, OutputSigma: 0.0001, ReasoningShare: -1}
}

// kvPrompt is prompt i of 297 tokens: 7 of chat template, 290 of text.
func kvPrompt(i int) []Message {
	head := fmt.Sprintf("kv prompt %d: ", i)
	return userMessages(head + strings.Repeat("x", 290*bytesPerToken-len(head)))
}

// checkKV fails the test unless the engine's block count is the sum of
// what its running sequences hold, within capacity, and the running
// list is the prefilling and decoding sequences.
func checkKV(t *testing.T, e *engine) {
	t.Helper()
	held := 0
	for el := e.order.Front(); el != nil; el = el.Next() {
		held += e.blocksHeld(el.Value.(*sequence))
	}
	if held != e.kvBlocks || e.kvBlocks > e.kvCap || e.kvBlocks < 0 {
		t.Fatalf("step %d: %d blocks counted, %d held by running sequences, capacity %d", e.steps, e.kvBlocks, held, e.kvCap)
	}
	if n := e.prefilling.Len() + len(e.decoding); n != e.order.Len() || n > e.cfg.MaxNumSeqs {
		t.Fatalf("step %d: %d prefilling + %d decoding, %d in the running list", e.steps, e.prefilling.Len(), len(e.decoding), e.order.Len())
	}
}

// TestKVAdmissionAndPreemption drives a virtual engine step by step: a
// waiting request is admitted only when its prompt's blocks fit, even
// with slots free; when the answers outgrow the cache the latest
// admitted request is preempted back to the front of the queue; every
// request still ends with its whole answer, its streamed tokens never
// going back, and the counters count each token and prompt once.
func TestKVAdmissionAndPreemption(t *testing.T) {
	const n, step = 5, 10 * time.Millisecond
	v, err := NewVirtual(tightKV())
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]*VirtualRequest, n)
	for i := range reqs {
		if reqs[i], err = v.Submit(i, kvPrompt(i), 700); err != nil {
			t.Fatal(err)
		}
		if got := promptTokens(kvPrompt(i)); got != 297 {
			t.Fatalf("prompt of %d tokens, want 297", got)
		}
	}
	v.AdvanceTo(step)
	st := v.Stats()
	if st.Running != 3 || st.Waiting != 2 || st.KVCacheUsage != 57.0/64 {
		t.Fatalf("after the first step: running %d, waiting %d, KV usage %v; want 3, 2 (KV room for three prompts only) and 57/64",
			st.Running, st.Waiting, st.KVCacheUsage)
	}
	checkKV(t, v.e)

	last := make([]int, n)
	firstPreempted := -1
	var firstWaiting int
	for now := 2 * step; v.Stats().Completed < n; now += step {
		if now > time.Hour {
			t.Fatalf("not done after an hour of simulated time: %+v", v.Stats())
		}
		v.AdvanceTo(now)
		checkKV(t, v.e)
		for i, r := range reqs {
			got := r.Tokens()
			if got < last[i] {
				t.Fatalf("request %d went back from %d to %d tokens", i, last[i], got)
			}
			last[i] = got
			if firstPreempted < 0 && r.Preemptions() > 0 {
				firstPreempted = i
				firstWaiting = v.Stats().Waiting
				if got == 0 {
					t.Errorf("request %d was preempted before its first token", i)
				}
			}
		}
	}
	if firstPreempted != 2 {
		t.Errorf("first preempted request %d, want 2, the latest admitted", firstPreempted)
	}
	if firstWaiting != 3 {
		t.Errorf("%d waiting after the first preemption, want 3", firstWaiting)
	}
	st = v.Stats()
	preempted, generated := 0, 0
	for i, r := range reqs {
		preempted += r.Preemptions()
		generated += r.Length()
		if r.Tokens() != r.Length() || r.Length() != 700 {
			t.Errorf("request %d ended with %d of %d tokens, want 700", i, r.Tokens(), r.Length())
		}
	}
	if st.Preemptions == 0 || st.Preemptions != int64(preempted) {
		t.Errorf("engine counted %d preemptions, requests %d; want the same, above 0", st.Preemptions, preempted)
	}
	if st.GenerationTokens != int64(generated) || st.PromptTokens != n*297 {
		t.Errorf("generation tokens %d, prompt tokens %d; want %d and %d, recomputed tokens not counted again",
			st.GenerationTokens, st.PromptTokens, generated, n*297)
	}
	if st.Running != 0 || st.Waiting != 0 || st.KVCacheUsage != 0 {
		t.Errorf("after the run: %+v, want an empty engine", st)
	}
}

// TestKVCancelFreesBlocks checks that a request leaving, wherever it
// is, gives its blocks back.
func TestKVCancelFreesBlocks(t *testing.T) {
	cfg := tightKV().WithDefaults()
	e := newEngine(cfg)
	seqs := make([]*sequence, 4)
	for i := range seqs {
		m := kvPrompt(i)
		seqs[i] = newSequence(promptTokens(m), cfg.plan(m, 700))
		e.enqueue(seqs[i])
	}
	for range 30 {
		e.credit += 10 * time.Millisecond
		e.advance()
		checkKV(t, e)
	}
	if e.kvBlocks == 0 {
		t.Fatal("nothing holds KV cache")
	}
	for _, s := range seqs {
		e.cancel(s)
		checkKV(t, e)
	}
	if e.kvBlocks != 0 || e.order.Len() != 0 || e.waiting.Len() != 0 {
		t.Errorf("after canceling all: %d blocks, %d running, %d waiting", e.kvBlocks, e.order.Len(), e.waiting.Len())
	}
}

// streamTokenIDs streams body and returns the answer's token ids and
// its usage's completion tokens; it runs off the test goroutine.
func streamTokenIDs(ts *testServer, body map[string]any) (ids []int, completion int, err error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.Post(ts.url+"/v1/chat/completions", "application/json", strings.NewReader(string(raw)))
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var d decoded
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			return nil, 0, fmt.Errorf("chunk %q: %w", data, err)
		}
		for _, c := range d.Choices {
			ids = append(ids, c.TokenIDs...)
		}
		if d.Usage != nil {
			completion = d.Usage.CompletionTokens
		}
	}
	if !done {
		return nil, 0, fmt.Errorf("stream ended without [DONE] (%v)", sc.Err())
	}
	return ids, completion, nil
}

// TestPreemptedStreams sends streams at once to a server whose cache
// cannot hold two of their answers: requests are preempted, yet each
// stream brings exactly the tokens the same request gets alone (no
// duplicate, none missing), and /metrics agrees with the engine.
func TestPreemptedStreams(t *testing.T) {
	cfg := tightKV()
	cfg.Speed = 20 // an answer takes 7 s of simulated time, 0.35 s of wall time
	ts := startServer(t, cfg)
	body := func(i int) map[string]any {
		return map[string]any{"messages": kvPrompt(i), "max_tokens": 700, "temperature": 0, "return_token_ids": true,
			"stream": true, "stream_options": map[string]any{"include_usage": true}}
	}
	const n = 4
	ids := make([][]int, n)
	completion := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i], completion[i], errs[i] = streamTokenIDs(ts, body(i)) })
	}
	wg.Wait()
	st := ts.Stats()
	if st.Preemptions == 0 {
		t.Fatalf("no preemption with %d concurrent answers of 997 tokens in a cache of 1024: %+v", n, st)
	}
	if r, w, kv, p := ts.scrape(t, "vllm:num_requests_running"), ts.scrape(t, "vllm:num_requests_waiting"),
		ts.scrape(t, "vllm:kv_cache_usage_perc"), ts.scrape(t, "vllm:num_preemptions_total"); r != 0 || w != 0 || kv != 0 || p != float64(st.Preemptions) {
		t.Errorf("metrics after the run: running %v, waiting %v, KV usage %v, preemptions %v; want 0, 0, 0, %d", r, w, kv, p, st.Preemptions)
	}
	for i := range n {
		if errs[i] != nil {
			t.Errorf("stream %d: %v", i, errs[i])
			continue
		}
		alone, c, err := streamTokenIDs(ts, body(i))
		if err != nil {
			t.Fatalf("stream %d alone: %v", i, err)
		}
		if len(ids[i]) != 700 || completion[i] != 700 || !slices.Equal(ids[i], alone) || c != 700 {
			t.Errorf("stream %d: %d token ids (usage %d), alone %d (usage %d), same %v; want 700 and the same ids",
				i, len(ids[i]), completion[i], len(alone), c, slices.Equal(ids[i], alone))
		}
	}
	if p := ts.Stats().Preemptions; p != st.Preemptions {
		t.Errorf("requests sent alone were preempted: %d preemptions, %d before", p, st.Preemptions)
	}
}

// TestKVMetricsMatchEngine scrapes /metrics of a server whose engine is
// held mid-run, with requests preempted, running and waiting, and
// compares every load figure with the engine's own state.
func TestKVMetricsMatchEngine(t *testing.T) {
	s, err := New(tightKV())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, url: hs.URL}
	e := s.eng
	e.mu.Lock()
	for i := range 5 {
		m := kvPrompt(i)
		e.enqueue(newSequence(promptTokens(m), s.cfg.plan(m, 700)))
	}
	for range 1000 {
		if e.preemptionTotal > 0 {
			break
		}
		e.credit += 10 * time.Millisecond
		e.advance()
	}
	running, waiting, blocks, preemptions := e.order.Len(), e.waiting.Len(), e.kvBlocks, e.preemptionTotal
	e.mu.Unlock()
	if preemptions == 0 || running == 0 || waiting == 0 {
		t.Fatalf("engine not in the state wanted: %d running, %d waiting, %d preemptions", running, waiting, preemptions)
	}
	checks := []struct {
		name string
		want float64
	}{
		{"vllm:num_requests_running", float64(running)},
		{"vllm:num_requests_waiting", float64(waiting)},
		{"vllm:num_requests_waiting_by_reason", float64(waiting)}, // the first sample: reason "capacity"
		{"vllm:kv_cache_usage_perc", float64(blocks) / 64},
		{"vllm:num_preemptions_total", float64(preemptions)},
	}
	for _, c := range checks {
		if got := ts.scrape(t, c.name); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	st := s.Stats()
	if st.Running != running || st.Waiting != waiting || st.Preemptions != preemptions || st.KVCacheUsage != float64(blocks)/64 {
		t.Errorf("Stats %+v disagrees with the engine", st)
	}
}

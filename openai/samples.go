package openai

import (
	"context"
	"sync"
)

// samplesAsRequests runs a request of req.N answers as req.N requests of
// one answer each, at once, for a server that refuses n above 1 (see
// Dialect.SamplesAsRequests). Answer k is sampled with Seed+k when the
// request has a seed, as vLLM samples the children of one request, so a
// run gives the same answers whichever way it asked. The first failure
// cancels the others and is returned; progress calls are serialised, as
// they are for one stream.
func (c *Client) samplesAsRequests(ctx context.Context, req ChatRequest, progress Progress) (*Completion, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		report  Progress
		wg      sync.WaitGroup
		comps   = make([]*Completion, req.N)
		errs    = make([]error, req.N)
		errOnce sync.Once
		first   = -1
	)
	if progress != nil {
		report = func(n int) {
			mu.Lock()
			defer mu.Unlock()
			progress(n)
		}
	}
	for k := range req.N {
		one := req
		one.N = 0
		if k > 0 && req.Seed != nil {
			seed := *req.Seed + int64(k)
			one.Seed = &seed
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			comps[k], errs[k] = c.ChatStream(ctx, one, report)
			if errs[k] != nil {
				errOnce.Do(func() { first = k; cancel() })
			}
		}()
	}
	wg.Wait()
	if first >= 0 {
		return nil, errs[first]
	}
	return joinSamples(comps), nil
}

// joinSamples makes one Completion of the answers of separate requests
// for one prompt: answer 0 in the top fields, every answer in Choices,
// usage counting the prompt once and every answer's tokens (as vLLM
// counts a request of several), the earliest first token and the latest
// end.
func joinSamples(comps []*Completion) *Completion {
	joined := *comps[0]
	joined.Choices = make([]Choice, len(comps))
	joined.Usage.CompletionTokens = 0
	joined.Chunks = 0
	for k, c := range comps {
		joined.Choices[k] = Choice{Reasoning: c.Reasoning, Content: c.Content, FinishReason: c.FinishReason,
			CompletionTokens: c.Usage.CompletionTokens, TokenIDs: c.TokenIDs}
		joined.Usage.CompletionTokens += c.Usage.CompletionTokens
		joined.Chunks += c.Chunks
		if c.TTFT > 0 && (joined.TTFT == 0 || c.TTFT < joined.TTFT) {
			joined.TTFT = c.TTFT
		}
		joined.Latency = max(joined.Latency, c.Latency)
	}
	joined.Usage.TotalTokens = joined.Usage.PromptTokens + joined.Usage.CompletionTokens
	return &joined
}

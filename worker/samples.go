package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/flights"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// A message of several samples (schema.Prompt.Samples: `aerie produce
// --samples N` with --turns last) is answered in one request with vLLM's
// n, so that the server reads the prompt once for all of them and shares
// its KV blocks; vLLM samples answer k with the request's seed plus k,
// which is the seed sample k has (schema.Params.ForSample). Each sample
// is then its own unit: its result is stored on its own subject, an
// answer cut at max_tokens is asked again alone under the run's on-length
// policy, and one that fails for good is dead-lettered alone. The
// message is acknowledged once every sample's outcome is stored, and a
// redelivery asks only for the samples that have none.
//
// A backend that refuses n, or answers once, is asked for each sample on
// its own, at once, from the same worker: that is found out once, with a
// test request (severalAnswers).

// CheckQuestion is what a worker, or `aerie doctor`, asks a backend to
// see that it answers: a question of one short answer.
const CheckQuestion = "Reply with the single word OK."

// samplesSupport is whether the backend answers several samples in one
// request (n): unknown until asked, then served or ignored for good.
type samplesSupport struct {
	state atomic.Int32
	mu    sync.Mutex // held while asking
}

// Whether the backend answers several samples in one request.
const (
	nUnknown int32 = iota
	nServed
	nIgnored
)

// severalAnswers reports whether the backend answers several samples in
// one request (n). The first call asks it, with a request for two
// answers of one token, and the answer is kept: a backend that refuses n
// (a permanent error) or sends one answer is asked for each sample on its
// own from then on. A failure that says nothing of n (the backend down)
// leaves it unknown, and the caller's samples go one by one this time.
func (e *executor) severalAnswers(ctx context.Context, l *lane) bool {
	s := &e.samples
	if v := s.state.Load(); v != nUnknown {
		return v == nServed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.state.Load(); v != nUnknown {
		return v == nServed
	}
	req := e.requests.request(l, []openai.Message{{Role: "user", Content: CheckQuestion}}, l.manifest.Params.ForSample(0))
	req.N, req.MaxTokens = 2, 1
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	comp, err := e.requests.backend.ChatStream(cctx, req, nil)
	switch {
	case err != nil && openai.Classify(err) == openai.Permanent:
		s.state.Store(nIgnored)
		e.log.Warn("the backend refuses several answers in one request (n): each sample is asked for on its own, by this worker", "err", err)
	case err != nil:
		e.log.Info("cannot tell yet whether the backend answers several samples in one request (n): asking for these one by one", "err", err)
	case len(comp.Choices) < 2:
		s.state.Store(nIgnored)
		e.log.Warn("the backend ignores n (one answer to a request for two): each sample is asked for on its own, by this worker")
	default:
		s.state.Store(nServed)
		e.log.Info("the backend answers several samples in one request (n): each prompt's samples share one prefill")
	}
	return s.state.Load() == nServed
}

// processSamples handles a delivered message of several samples, p, from
// decode to acknowledgement (see process).
func (e *executor) processSamples(ctx context.Context, d *delivery, p *schema.Prompt, l *window.Lease, generated func()) {
	ln := d.lane
	jobs := make([]*job, p.SampleCount())
	for k := range jobs {
		jobs[k] = newJob(ln, p.Sampled(k))
	}
	left := jobs
	if d.attempt > 1 {
		var err error
		if left, err = e.settler.samplesLeft(ctx, d, jobs); err != nil || len(left) == 0 {
			l.Release()
			generated()
			if err == nil {
				if aerr := d.ack(ctx); aerr != nil {
					ln.log.Warn("ack of an already answered prompt failed; it comes back and is acknowledged then", "id", p.ID, "err", aerr)
				}
				ln.n.alreadySettled.Add(int64(len(jobs)))
				ln.log.Info("redelivered prompt has every sample's outcome stored: acknowledged without generating it", "id", p.ID, "samples", len(jobs))
				return
			}
			// The look-up failed: no sample is known settled.
			e.settler.settleSamples(ctx, d, jobs, nil, []error{err})
			return
		}
	}
	if policy.SlowFor(p.LengthHint, d.attempt, ln.maxDeliver, ln.limit()) {
		l.Release()
		generated()
		e.settler.settleSamples(ctx, d, left, nil, []error{policy.ErrSlowForHint})
		return
	}
	turns, errs := e.answerSamples(ctx, d, left)
	l.Release()
	generated()
	e.settler.settleSamples(ctx, d, left, turns, errs)
}

// answerSamples answers the samples of jobs, consecutive samples of one
// prompt: in one request when there are several and the backend answers
// n, then each alone that still needs it (all of them with a backend
// that does not; an answer cut at max_tokens that the run's on-length
// policy asks again with more). It returns each sample's turn, or why it
// has none.
func (e *executor) answerSamples(ctx context.Context, d *delivery, jobs []*job) ([]*schema.Turn, []error) {
	turns, errs := make([]*schema.Turn, len(jobs)), make([]error, len(jobs))
	msgs := jobs[0].messages()
	var alone []int
	if len(jobs) > 1 && e.severalAnswers(ctx, d.lane) {
		got, err := e.askSeveral(ctx, d, jobs, msgs)
		if err != nil {
			for i := range errs {
				errs[i] = err
			}
			return turns, errs
		}
		for i, j := range jobs {
			if i >= len(got) {
				alone = append(alone, i)
				continue
			}
			a := got[i]
			if a.FinishReason == "length" {
				next, err := policy.OnLength(d.lane.manifest.Policy, a.maxTokens, j.lengthBase, a.Usage.CompletionTokens)
				if err != nil {
					errs[i] = err
					continue
				}
				if next > 0 {
					j.lane.log.Info("answer truncated; asking again with a larger max_tokens", "id", j.p.ID, "sample", j.p.Sample, "max_tokens", next)
					j.params.MaxTokens = next
					alone = append(alone, i)
					continue
				}
			}
			turns[i] = j.turn(0, a, e.name)
		}
	} else {
		for i := range jobs {
			alone = append(alone, i)
		}
	}
	var wg sync.WaitGroup
	for _, i := range alone {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := jobs[i]
			f := &flights.Flight{Key: policy.FlightKey{Seq: d.seq, Kind: policy.SampleOf, Sample: j.p.Sample}, Lane: d.lane.index, Unit: j.p.Unit(),
				Hint: j.p.LengthHint, Attempt: d.attempt, Last: d.lane.lastDelivery(d.attempt), Group: true}
			turns[i], errs[i] = e.ask(ctx, j, 0, msgs, f)
		}()
	}
	wg.Wait()
	return turns, errs
}

// askSeveral sends one request for the samples of jobs (n), with the
// first sample's parameters: vLLM gives answer k the seed plus k, the
// seed of the sample k after the first. It returns the answers in
// order, as many as the server sent.
func (e *executor) askSeveral(ctx context.Context, d *delivery, jobs []*job, msgs []openai.Message) ([]*answer, error) {
	j0, ln := jobs[0], d.lane
	f := &flights.Flight{Key: policy.FlightKey{Seq: d.seq}, Lane: ln.index, Unit: j0.p.Unit(), Hint: j0.p.LengthHint, Attempt: d.attempt,
		Last: ln.lastDelivery(d.attempt), Group: true}
	defer e.flights.Add(f)()
	req := e.requests.request(ln, msgs, j0.params)
	req.N = len(jobs)
	comp, err := e.requests.send(ctx, ln, f, req)
	if err != nil {
		return nil, err
	}
	if len(comp.Choices) < req.N && e.samples.state.CompareAndSwap(nServed, nIgnored) {
		e.log.Warn("the backend sent fewer answers than asked for (n): each sample is asked for on its own from now on",
			"asked", req.N, "got", len(comp.Choices))
	}
	out := make([]*answer, 0, min(len(comp.Choices), len(jobs)))
	for _, c := range comp.Choices[:min(len(comp.Choices), len(jobs))] {
		one := *comp
		one.Choices = nil
		one.Reasoning, one.Content, one.FinishReason, one.TokenIDs = c.Reasoning, c.Content, c.FinishReason, c.TokenIDs
		one.Usage = openai.Usage{PromptTokens: comp.Usage.PromptTokens, CompletionTokens: c.CompletionTokens,
			TotalTokens: comp.Usage.PromptTokens + c.CompletionTokens}
		ln.answers.add(c.CompletionTokens)
		ln.addHinted(j0.p.LengthHint, c.CompletionTokens)
		out = append(out, &answer{Completion: &one, maxTokens: req.MaxTokens})
	}
	return out, nil
}

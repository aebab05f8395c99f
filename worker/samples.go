package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
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

// Whether the backend answers several samples in one request.
const (
	nUnknown int32 = iota
	nServed
	nIgnored
)

// sampleKey keys, in Worker.inFlight, a request of one sample of a
// message of several.
type sampleKey struct {
	seq    uint64
	sample int
}

// severalAnswers reports whether the backend answers several samples in
// one request (n). The first call asks it, with a request for two
// answers of one token, and the answer is kept: a backend that refuses n
// (a permanent error) or sends one answer is asked for each sample on its
// own from then on. A failure that says nothing of n (the backend down)
// leaves it unknown, and the caller's samples go one by one this time.
func (w *Worker) severalAnswers(ctx context.Context, l *lane) bool {
	if s := w.nSupport.Load(); s != nUnknown {
		return s == nServed
	}
	w.nMu.Lock()
	defer w.nMu.Unlock()
	if s := w.nSupport.Load(); s != nUnknown {
		return s == nServed
	}
	req := Request(l.manifest, []openai.Message{{Role: "user", Content: CheckQuestion}}, l.manifest.Params.ForSample(0))
	req.N, req.MaxTokens = 2, 1
	if w.cfg.YieldToServing {
		req.Priority = w.cfg.BatchPriority
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	comp, err := w.backend.ChatStream(cctx, req, nil)
	switch {
	case err != nil && openai.Classify(err) == openai.Permanent:
		w.nSupport.Store(nIgnored)
		w.log.Warn("the backend refuses several answers in one request (n): each sample is asked for on its own, by this worker", "err", err)
	case err != nil:
		w.log.Info("cannot tell yet whether the backend answers several samples in one request (n): asking for these one by one", "err", err)
	case len(comp.Choices) < 2:
		w.nSupport.Store(nIgnored)
		w.log.Warn("the backend ignores n (one answer to a request for two): each sample is asked for on its own, by this worker")
	default:
		w.nSupport.Store(nServed)
		w.log.Info("the backend answers several samples in one request (n): each prompt's samples share one prefill")
	}
	return w.nSupport.Load() == nServed
}

// processSamples handles a delivered message of several samples, p, from
// decode to acknowledgement (see process).
func (w *Worker) processSamples(ctx context.Context, d *delivery, p *schema.Prompt, l *lease, generated func()) {
	ln := d.lane
	jobs := make([]*job, p.SampleCount())
	for k := range jobs {
		jobs[k] = newJob(ln, p.Sampled(k))
	}
	left := jobs
	if d.attempt > 1 {
		var err error
		if left, err = w.samplesLeft(ctx, d, jobs); err != nil || len(left) == 0 {
			l.release()
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
			w.settleSamples(ctx, d, jobs, nil, []error{err})
			return
		}
	}
	if ln.slowForHint(p.LengthHint, d.attempt) {
		l.release()
		generated()
		w.settleSamples(ctx, d, left, nil, []error{errSlowForHint})
		return
	}
	turns, errs := w.answerSamples(ctx, d, left)
	l.release()
	generated()
	w.settleSamples(ctx, d, left, turns, errs)
}

// samplesLeft returns the jobs whose sample has no outcome stored by an
// earlier delivery: no result, and no dead letter written for this very
// message. A look-up that fails is a *storeError, as in settledBefore,
// except on the last delivery, where the sample is generated.
func (w *Worker) samplesLeft(ctx context.Context, d *delivery, jobs []*job) ([]*job, error) {
	var left []*job
	for _, j := range jobs {
		u := j.p.Unit()
		res, err := lastStored(ctx, w.results, schema.ResultSubject(d.lane.run, u))
		if err == nil && res != nil {
			continue
		}
		if err == nil {
			var dead *nats.Header
			if m, derr := lastStored(ctx, w.dead, schema.DeadSubject(d.lane.run, u)); derr != nil {
				err = derr
			} else if m != nil {
				dead = &m.Header
			}
			if dead != nil {
				if seq, ok := schema.DeadLetterPromptSeq(*dead); ok && seq == d.seq {
					continue
				}
			}
		}
		if err != nil {
			if d.lane.lastDelivery(d.attempt) {
				left = append(left, j)
				continue
			}
			return nil, &storeError{fmt.Errorf("look for what an earlier delivery stored of %s sample %d: %w", u.ID, u.Sample, err)}
		}
		left = append(left, j)
	}
	return left, nil
}

// answerSamples answers the samples of jobs, consecutive samples of one
// prompt: in one request when there are several and the backend answers
// n, then each alone that still needs it (all of them with a backend
// that does not; an answer cut at max_tokens that the run's on-length
// policy asks again with more). It returns each sample's turn, or why it
// has none.
func (w *Worker) answerSamples(ctx context.Context, d *delivery, jobs []*job) ([]*schema.Turn, []error) {
	turns, errs := make([]*schema.Turn, len(jobs)), make([]error, len(jobs))
	msgs := make([]openai.Message, len(jobs[0].p.Messages))
	for i, m := range jobs[0].p.Messages {
		msgs[i] = openai.Message{Role: m.Role, Content: m.Content}
	}
	var alone []int
	if len(jobs) > 1 && w.severalAnswers(ctx, d.lane) {
		got, err := w.askSeveral(ctx, d, jobs, msgs)
		if err != nil {
			for i := range errs {
				errs[i] = err
			}
			return turns, errs
		}
		policy := d.lane.manifest.Policy
		for i, j := range jobs {
			if i >= len(got) {
				alone = append(alone, i)
				continue
			}
			a := got[i]
			if a.FinishReason == "length" && policy.Length() != schema.OnLengthKeep {
				next := nextBudget(a.maxTokens, policy.LengthRetryMaxTokens, j.lengthBase)
				if policy.Length() == schema.OnLengthRetry && next > a.maxTokens {
					j.lane.log.Info("answer truncated; asking again with a larger max_tokens", "id", j.p.ID, "sample", j.p.Sample, "max_tokens", next)
					j.params.MaxTokens = next
					alone = append(alone, i)
					continue
				}
				errs[i] = &truncatedError{maxTokens: a.maxTokens, completionTokens: a.Usage.CompletionTokens}
				continue
			}
			turns[i] = w.turnOf(j, 0, a)
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
			f := &flight{lane: d.lane, last: d.lane.lastDelivery(d.attempt), hint: j.p.LengthHint, attempt: d.attempt,
				seq: d.seq, unit: j.p.Unit(), group: true}
			key := sampleKey{d.seq, j.p.Sample}
			w.inFlight.Store(key, f)
			defer w.inFlight.Delete(key)
			turns[i], errs[i] = w.askTurn(ctx, j, 0, msgs, f)
		}()
	}
	wg.Wait()
	return turns, errs
}

// askSeveral sends one request for the samples of jobs (n), with the
// first sample's parameters: vLLM gives answer k the seed plus k, the
// seed of the sample k after the first. It returns the answers in
// order, as many as the server sent.
func (w *Worker) askSeveral(ctx context.Context, d *delivery, jobs []*job, msgs []openai.Message) ([]*answer, error) {
	j0, ln := jobs[0], d.lane
	f := &flight{lane: ln, last: ln.lastDelivery(d.attempt), hint: j0.p.LengthHint, attempt: d.attempt,
		seq: d.seq, unit: j0.p.Unit(), group: true}
	w.inFlight.Store(d.seq, f)
	defer w.inFlight.Delete(d.seq)
	req := Request(ln.manifest, msgs, j0.params)
	req.N = len(jobs)
	if w.cfg.YieldToServing {
		req.Priority = w.cfg.BatchPriority
	}
	w.startGenerating()
	comp, err := w.chat(ctx, f, req, func(n int) {
		f.tokens.Add(int64(n))
		ln.n.tokens.Add(int64(n))
	})
	if err == nil {
		err = severalFault(comp, req.ReturnTokenIDs)
	}
	w.generating.Add(-1)
	w.breaker.record(err)
	w.metrics.request(ln.run, comp, err)
	if err != nil {
		return nil, err
	}
	if len(comp.Choices) < req.N && w.nSupport.CompareAndSwap(nServed, nIgnored) {
		w.log.Warn("the backend sent fewer answers than asked for (n): each sample is asked for on its own from now on",
			"asked", req.N, "got", len(comp.Choices))
	}
	out := make([]*answer, 0, min(len(comp.Choices), len(jobs)))
	for _, c := range comp.Choices[:min(len(comp.Choices), len(jobs))] {
		one := *comp
		one.Choices = nil
		one.Reasoning, one.Content, one.FinishReason, one.TokenIDs = c.Reasoning, c.Content, c.FinishReason, c.TokenIDs
		one.Usage = openai.Usage{PromptTokens: comp.Usage.PromptTokens, CompletionTokens: c.CompletionTokens,
			TotalTokens: comp.Usage.PromptTokens + c.CompletionTokens}
		ln.n.addAnswer(c.CompletionTokens)
		ln.lengths.add(c.CompletionTokens)
		ln.addHinted(j0.p.LengthHint, c.CompletionTokens)
		out = append(out, &answer{Completion: &one, maxTokens: req.MaxTokens})
	}
	return out, nil
}

// severalFault is what makes a whole answer of several unusable: one of
// them ended by the server, or token ids missing where the run asks for
// them (see aborted and lacksTokenIDs).
func severalFault(c *openai.Completion, tokenIDs bool) error {
	for _, ch := range c.Choices {
		if err := aborted(&openai.Completion{FinishReason: ch.FinishReason, Usage: openai.Usage{CompletionTokens: ch.CompletionTokens}}); err != nil {
			return err
		}
		if tokenIDs && (len(c.PromptTokenIDs) == 0 || len(ch.TokenIDs) == 0 && ch.CompletionTokens > 0) {
			return errNoTokenIDs
		}
	}
	return nil
}

// settleSamples ends a delivery of several samples, jobs being those this
// delivery was to answer, turns their answers and errs why the others
// have none (a single error, for every sample, when errs is shorter than
// jobs). Answers are stored and samples that failed for good
// dead-lettered at once; the rest, if any, decide how the message goes
// back, as settle decides for one: every sample then counts one failure,
// under the first's attempts, and its outcome is stored when the message
// is dead-lettered.
func (w *Worker) settleSamples(ctx context.Context, d *delivery, jobs []*job, turns []*schema.Turn, errs []error) {
	log := withLazy(d.lane.log, "subject", d.msg.Subject(), "delivery", d.attempt, "id", jobs[0].p.ID, "samples", len(jobs))
	errOf := func(i int) error {
		if i < len(errs) {
			return errs[i]
		}
		return errs[0]
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		rest    []*job
		restErr error
		dead    int
	)
	keep := func(j *job, err error) {
		mu.Lock()
		defer mu.Unlock()
		rest = append(rest, j)
		if restErr == nil {
			restErr = err
		}
	}
	bury := func(j *job, reason string, cause error) {
		if err := w.publishDeadLetter(ctx, d, j, reason, cause); err != nil {
			keep(j, &storeError{fmt.Errorf("dead-letter %s sample %d: %w", j.p.ID, j.p.Sample, err)})
			return
		}
		mu.Lock()
		dead++
		mu.Unlock()
		d.lane.n.deadLettered.Add(1)
		w.metrics.settled(d.lane.run, deadLetterOutcome(reason))
	}
	for i, j := range jobs {
		var turn *schema.Turn
		if i < len(turns) {
			turn = turns[i]
		}
		err := errOf(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if turn == nil {
				if what, reason := decide(err, false, false); what == deadLetter {
					bury(j, reason, err)
					return
				}
				keep(j, err)
				return
			}
			j.turns = []*schema.Turn{turn}
			ours, perr := w.publishResult(ctx, d.attempt, j)
			switch {
			case errors.Is(perr, nats.ErrMaxPayload):
				bury(j, schema.ReasonPermanent, &tooLargeError{perr})
			case perr != nil:
				keep(j, &storeError{fmt.Errorf("store the answer of %s sample %d: %w", j.p.ID, j.p.Sample, perr)})
			case ours:
				d.lane.n.completed.Add(1)
				w.metrics.settled(d.lane.run, completedOutcome(j))
			default:
				d.lane.n.alreadySettled.Add(1)
				w.metrics.settled(d.lane.run, completedOutcome(j))
			}
		}()
	}
	wg.Wait()
	if len(rest) == 0 {
		if dead == len(jobs) {
			d.term(schema.ReasonPermanent, log)
			return
		}
		if err := d.ack(ctx); err != nil {
			log.Warn("ack failed after every sample's outcome was stored", "err", err)
		}
		return
	}
	w.settleRest(ctx, d, rest, restErr, log)
}

// settleRest hands back, or dead-letters, a message whose samples rest
// have no outcome yet, err being why.
func (w *Worker) settleRest(ctx context.Context, d *delivery, rest []*job, err error, log *slog.Logger) {
	what, reason := decide(err, d.lane.lastDelivery(d.attempt), w.breakerOpen())
	var delay time.Duration
	if what == retry {
		what, reason, delay = w.countAgainst(ctx, rest[0], d.attempt, err, log)
	}
	switch what {
	case deadLetter:
		log.Warn("dead-lettering the samples left", "reason", reason, "left", len(rest), "err", err)
		for _, j := range rest {
			if derr := w.publishDeadLetter(ctx, d, j, reason, err); derr != nil {
				log.Error("cannot store a dead letter; prompt will be retried", "sample", j.p.Sample, "err", derr)
				w.metrics.settled(d.lane.run, OutcomeTransient)
				d.nak(retryDelay(d.attempt, w.cfg.RetryBase, w.cfg.RetryMax), log)
				return
			}
			d.lane.n.deadLettered.Add(1)
			w.metrics.settled(d.lane.run, deadLetterOutcome(reason))
		}
		d.term(reason, log)
	case done, hedgedAway:
		// Not an outcome of a sample without an answer.
		d.nak(0, log)
	default:
		w.giveBack(ctx, d, what, delay, err, log)
	}
}

// breakerOpen reports whether the backend is down for this worker.
func (w *Worker) breakerOpen() bool {
	open, _ := w.breaker.isOpen()
	return open
}

// Package probe is a small interactive load: short chat requests sent at
// a given rate to an OpenAI-compatible server, each one's time to first
// token measured. It stands for the users of a server that also serves a
// batch run, so that what the batch does to them can be measured
// (`aerie sim probe`).
package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

// Backend is what the probe needs of a server; *openai.Client has it.
type Backend interface {
	ChatStream(ctx context.Context, req openai.ChatRequest, progress openai.Progress) (*openai.Completion, error)
}

// Config is a probe's load. Rate and Duration are required.
type Config struct {
	// Rate is the mean requests a second. Arrivals are a Poisson process
	// (exponential gaps), as independent users' are.
	Rate float64
	// Duration bounds the probe: no request is sent after it; those sent
	// are waited for.
	Duration time.Duration
	// Model is the model asked for; MaxTokens bounds each answer (zero
	// means DefaultMaxTokens).
	Model     string
	MaxTokens int
	// Seed makes the arrival times repeatable.
	Seed uint64
	// OnAnswer, when set, sees each request's time to first token and
	// error as it ends; it is called from the requests' goroutines, at
	// once.
	OnAnswer func(ttft time.Duration, err error)
}

// DefaultMaxTokens is an interactive answer's length for the probe: its
// time to first token is what is measured, not the answer.
const DefaultMaxTokens = 32

// Report is what a probe measured.
type Report struct {
	Sent, Answered, Failed int
	// P50, P95, P99 and Max are the answered requests' times to first
	// token; zero with none answered.
	P50, P95, P99, Max time.Duration
	// FirstError is the first failure's error, for the message.
	FirstError error
}

// Run sends the load until cfg.Duration has passed (or ctx ends), waits
// for the requests sent, and reports.
func Run(ctx context.Context, b Backend, cfg Config) (Report, error) {
	if !(cfg.Rate > 0) || cfg.Duration <= 0 {
		return Report{}, fmt.Errorf("probe: a rate above 0 and a duration are required (got rate %v, duration %v)", cfg.Rate, cfg.Duration)
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	var (
		mu    sync.Mutex
		ttfts []time.Duration
		rep   Report
		wg    sync.WaitGroup
	)
	end := time.Now().Add(cfg.Duration)
	next := time.Now()
	for i := 0; ; i++ {
		next = next.Add(time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)))
		if next.After(end) {
			break
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			wg.Wait()
			return summarize(rep, ttfts), ctx.Err()
		case <-t.C:
		}
		rep.Sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := openai.ChatRequest{Model: cfg.Model, MaxTokens: cfg.MaxTokens,
				Messages: []openai.Message{{Role: "user", Content: fmt.Sprintf("Interactive question %d: say hello.", i)}}}
			c, err := b.ChatStream(ctx, req, func(int) {})
			var ttft time.Duration
			if err == nil {
				ttft = c.TTFT
			}
			mu.Lock()
			if err != nil {
				rep.Failed++
				if rep.FirstError == nil {
					rep.FirstError = err
				}
			} else {
				rep.Answered++
				ttfts = append(ttfts, ttft)
			}
			mu.Unlock()
			if cfg.OnAnswer != nil {
				cfg.OnAnswer(ttft, err)
			}
		}()
	}
	wg.Wait()
	rep = summarize(rep, ttfts)
	if rep.Answered == 0 && rep.Failed > 0 {
		return rep, fmt.Errorf("probe: every request failed, the first with: %w", rep.FirstError)
	}
	return rep, nil
}

func summarize(rep Report, ttfts []time.Duration) Report {
	if len(ttfts) == 0 {
		return rep
	}
	slices.Sort(ttfts)
	q := func(p float64) time.Duration { return ttfts[min(len(ttfts)-1, int(p*float64(len(ttfts))))] }
	rep.P50, rep.P95, rep.P99, rep.Max = q(0.50), q(0.95), q(0.99), ttfts[len(ttfts)-1]
	return rep
}

// String is the report in one line.
func (r Report) String() string {
	s := fmt.Sprintf("%d sent, %d answered, %d failed", r.Sent, r.Answered, r.Failed)
	if r.Answered > 0 {
		s += fmt.Sprintf("; time to first token p50 %v, p95 %v, p99 %v, max %v",
			r.P50.Round(time.Millisecond), r.P95.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Max.Round(time.Millisecond))
	}
	if r.FirstError != nil {
		s += fmt.Sprintf("; first failure: %v", r.FirstError)
	}
	return s
}

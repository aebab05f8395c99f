package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// checkBackend waits until the backend answers /v1/models (a vLLM server
// takes minutes to load a large model, and a worker may start first),
// then makes sure it serves model, the run's. A worker pointed at the
// wrong server or model would otherwise turn every prompt into a dead
// letter (404 is a permanent error), so that is a start-up error
// instead. name and log are the worker's.
func checkBackend(ctx context.Context, backend Backend, name string, log *slog.Logger, model string) error {
	ml, ok := backend.(modelLister)
	if !ok {
		return nil
	}
	for attempt := 1; ; attempt++ {
		models, err := ml.Models(ctx)
		if err == nil {
			ids := make([]string, len(models))
			for i, m := range models {
				ids[i] = m.ID
			}
			if !slices.Contains(ids, model) {
				return fmt.Errorf("worker %s: the backend serves %v, not the run's model %q: point --backend at a server of that model (or produce a new run for this one)", name, ids, model)
			}
			return nil
		}
		switch openai.Classify(err) {
		case openai.Canceled:
			return ctx.Err()
		case openai.Auth:
			return fmt.Errorf("worker %s: the backend refused our credentials (%w): check --api-key-file or AERIE_API_KEY", name, err)
		}
		d := retryDelay(attempt, time.Second, 30*time.Second)
		log.Warn("backend not answering yet; waiting before pulling prompts", "err", err, "retry_in", d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}

// prober asks a worker's backend, while its breaker is open, whether
// the worker may resume (probe). Its fields are set by New; lastLog is
// the breaker's probing goroutine's.
type prober struct {
	log      *slog.Logger
	backend  Backend
	runs     *runSet
	health   *breaker
	priority int
	// lastLog is when a failed probe was last logged.
	lastLog time.Time
}

// probe decides whether a paused worker may resume: the backend
// is healthy, accepts our credentials and serves the run's model. Each
// part is checked when the backend can tell it. /v1/models is asked
// because it needs the key where /health does not (vLLM's --api-key
// leaves /health open), and because a backend restarted under another
// model name answers 404 to every request while its /health is fine.
func (p *prober) probe(ctx context.Context) error {
	if r, ok := p.backend.(keyReloader); ok {
		changed, err := r.ReloadAPIKey()
		if err != nil {
			return fmt.Errorf("re-read the API key: %w", err)
		}
		if changed {
			p.log.Info("API key file changed; trying the new key")
		}
	}
	if h, ok := p.backend.(healthChecker); ok {
		if err := h.Health(ctx); err != nil {
			return err
		}
	}
	ml, ok := p.backend.(modelLister)
	if !ok {
		return nil
	}
	models, err := ml.Models(ctx)
	if err != nil {
		return err
	}
	ids := make([]string, len(models))
	for i, m := range models {
		ids[i] = m.ID
	}
	for _, l := range p.runs.serving() {
		if !slices.Contains(ids, l.manifest.Model) {
			return fmt.Errorf("the backend serves %v, not the run's model %q", ids, l.manifest.Model)
		}
	}
	if err := p.probePriority(ctx); err != nil {
		return err
	}
	return p.probeTokenIDs(ctx)
}

// probePriority asks, when the worker paused for refused priorities, for
// one short answer with its priority: the worker resumes once the backend
// takes it.
func (p *prober) probePriority(ctx context.Context) error {
	if _, reason := p.health.isOpen(); reason != policy.PriorityFix {
		return nil
	}
	lanes := p.runs.serving()
	if len(lanes) == 0 {
		return nil
	}
	l := lanes[0]
	params := l.manifest.Params
	params.MaxTokens = probeMaxTokens
	req := Request(l.manifest, []openai.Message{{Role: "user", Content: "Say OK."}}, params)
	req.Priority = p.priority
	_, err := p.backend.ChatStream(ctx, req, func(int) {})
	return err
}

// probeTokenIDs asks, when the worker paused for answers without token
// ids, for one short answer with them: the worker resumes only once the
// backend returns them.
func (p *prober) probeTokenIDs(ctx context.Context) error {
	if _, reason := p.health.isOpen(); reason != policy.ErrNoTokenIDs.Error() {
		return nil
	}
	for _, l := range p.runs.serving() {
		if !l.manifest.ReturnTokenIDs {
			continue
		}
		params := l.manifest.Params
		params.MaxTokens = probeMaxTokens
		comp, err := p.backend.ChatStream(ctx, Request(l.manifest, []openai.Message{{Role: "user", Content: "Say OK."}}, params), func(int) {})
		if err != nil {
			return err
		}
		if policy.LacksTokenIDs(comp) {
			return policy.ErrNoTokenIDs
		}
	}
	return nil
}

// probeMaxTokens bounds the answer of a token-id probe: a few tokens
// show whether ids come back.
const probeMaxTokens = 8

// probeLogEvery spaces the log lines of a paused worker whose probes keep
// failing: the first failure of a pause is logged, then one a minute.
const probeLogEvery = time.Minute

// logProbeFailure logs a failed probe of a paused worker. It is called
// from the breaker's probing goroutine only.
func (p *prober) logFailure(err error, open time.Duration) {
	if open >= probeLogEvery && time.Since(p.lastLog) < probeLogEvery {
		return
	}
	p.lastLog = time.Now()
	_, reason := p.health.isOpen()
	p.log.Warn("still paused: the backend failed its probe", "probe", err, "paused_for", open.Round(time.Second), "reason", reason)
}

package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/worker"
)

// completionMaxTokens bounds the test completion: enough to see the first
// tokens (and whether they are reasoning), cheap on a busy server.
const completionMaxTokens = 8

// completionPrompt is the test completion's question.
const completionPrompt = worker.CheckQuestion

// checkHealth asks the backend's /health, which vLLM answers with 200
// while its engine is alive.
func checkHealth(ctx context.Context, s *session) Result {
	if s.cfg.Backend == "" {
		return skip("no backend given (--backend)")
	}
	if s.clientErr != nil {
		return fail("give --backend as the server's root URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted)",
			"%v", s.clientErr)
	}
	var took time.Duration
	err := s.untilAnswered(ctx, healthURL(s.cfg.Backend)+" to answer 200", s.cfg.CheckTimeout, func(ctx context.Context) error {
		start := time.Now()
		err := s.client.Health(ctx)
		took = time.Since(start)
		return err
	})
	if err != nil {
		return backendFailure(err)
	}
	return pass("%s answered 200 in %s", healthURL(s.cfg.Backend), formatDuration(took))
}

// healthURL is the URL the health check probes: /health at the server's
// root, which is backend without a trailing /v1 (openai.Client accepts
// both forms and derives its endpoints the same way).
func healthURL(backend string) string {
	root := strings.TrimRight(strings.TrimSpace(backend), "/")
	root = strings.TrimRight(strings.TrimSuffix(root, "/v1"), "/")
	return root + "/health"
}

// checkModel lists the served models and looks for the run's model among
// them: the manifest's, or the one given when there is no manifest yet. A
// worker pointed at a server of another model would turn every prompt
// into a dead letter.
func checkModel(ctx context.Context, s *session) Result {
	if s.cfg.Backend == "" {
		return skip("no backend given (--backend)")
	}
	if !s.passed("backend") {
		return skip("backend not healthy (see backend)")
	}
	var models []openai.Model
	err := s.untilAnswered(ctx, "the list of served models", s.cfg.CheckTimeout, func(ctx context.Context) error {
		var err error
		models, err = s.client.Models(ctx)
		return err
	})
	if err != nil {
		return backendFailure(err)
	}
	s.models, s.listed = models, true
	ids := modelIDs(models)
	served := quoteList(ids, 10)
	if len(models) == 0 {
		return fail("load a model in the backend", "the backend serves no model")
	}
	var want, fix string
	switch {
	case s.manifest != nil:
		want = s.manifest.Model
		fix = fmt.Sprintf("point --backend at a server of %q, or produce the prompts as a new run with --model %s", want, suggestModel(ids))
	case s.cfg.Model != "":
		want = s.cfg.Model
		fix = fmt.Sprintf("pass --model %s, or point --backend at a server of %q", suggestModel(ids), want)
	default:
		return skip("no run manifest to compare with, and no model given (--model); the backend serves %s", served)
	}
	m, ok := s.servedModel(want)
	if !ok {
		whose := "the run's model"
		if s.manifest == nil {
			whose = "the model given (no run manifest yet)"
		}
		return fail(fix, "wrong model name: the backend serves %s, %s is %q", served, whose, want)
	}
	detail := fmt.Sprintf("%q is served", want)
	if m.MaxModelLen > 0 {
		detail += fmt.Sprintf(" with max_model_len %d", m.MaxModelLen)
	}
	if len(ids) > 1 {
		detail += "; also served: " + served
	}
	return pass("%s", detail)
}

// checkCompletion sends one short streamed completion with the run's
// model and sampling parameters, as a worker would, and reports the time
// to the first token and whether reasoning came back.
func checkCompletion(ctx context.Context, s *session) Result {
	if s.extraction() != nil {
		return skip("a hidden-states run asks no chat question (see extraction)")
	}
	if s.cfg.Backend == "" {
		return skip("no backend given (--backend)")
	}
	if !s.passed("backend") {
		return skip("backend not healthy (see backend)")
	}
	if s.done["engine"] == Fail && s.engine != nil {
		return skip("not asked: the engine cannot serve the run as asked (see engine)")
	}
	if s.done["model"] == Fail {
		if !s.listed {
			return skip("not asked: the backend's model list failed (see model)")
		}
		return skip("the run's model is not served (see model)")
	}
	model, from, ok := s.runModel()
	if !ok {
		if !s.listed {
			return skip("no model to ask: no run manifest and no model list (see model)")
		}
		return skip("no model to ask: no run manifest, and the backend serves %d models", len(s.models))
	}
	req := openai.ChatRequest{
		Model:     model,
		Messages:  []openai.Message{{Role: "user", Content: completionPrompt}},
		MaxTokens: completionMaxTokens,
	}
	if s.manifest != nil {
		// Every parameter of the run, so that one the backend refuses
		// shows here rather than as a dead letter for every prompt.
		params := s.manifest.Params
		params.MaxTokens = completionMaxTokens
		req = worker.Request(s.manifest, req.Messages, params)
	} else {
		req.ReturnTokenIDs = s.cfg.ReturnTokenIDs
	}
	var comp *openai.Completion
	err := s.untilAnswered(ctx, "a test completion", s.cfg.CompletionTimeout, func(ctx context.Context) error {
		var err error
		comp, err = s.client.ChatStream(ctx, req, nil)
		return err
	})
	if err != nil {
		return backendFailure(err)
	}
	if req.ReturnTokenIDs && (len(comp.TokenIDs) == 0 || len(comp.PromptTokenIDs) == 0) {
		return fail("the run stores token ids (--return-token-ids): use vLLM 0.10.2 or later, which returns them, or produce the run without --return-token-ids",
			"%q answered without the token ids the run asks for (return_token_ids): %d answer and %d prompt token ids", model, len(comp.TokenIDs), len(comp.PromptTokenIDs))
	}
	reasoning := "no reasoning returned (expected for a model that does not think; for one that does, check the server's reasoning parser)"
	if comp.Reasoning != "" {
		reasoning = "reasoning returned"
	}
	return pass("%q (%s) answered: TTFT %s, %d tokens in %s, finish %q, %s",
		model, from, formatDuration(comp.TTFT), comp.Usage.CompletionTokens, formatDuration(comp.Latency), comp.FinishReason, reasoning)
}

// checkPriority, for workers that will yield to serving traffic, sends a
// one-token completion with their priority: vLLM refuses any priority
// but 0 unless it runs --scheduling-policy priority, and every request of
// such a worker would be refused.
func checkPriority(ctx context.Context, s *session) Result {
	if !s.cfg.YieldToServing {
		return skip("the workers do not yield to serving traffic (--yield-to-serving)")
	}
	if s.cfg.Backend == "" {
		return skip("no backend given (--backend)")
	}
	if !s.passed("backend") {
		return skip("backend not healthy (see backend)")
	}
	model, _, ok := s.runModel()
	if !ok {
		return skip("no model to ask (see model)")
	}
	priority := s.cfg.BatchPriority
	if priority == 0 {
		priority = worker.DefaultBatchPriority
	}
	req := openai.ChatRequest{Model: model, Messages: []openai.Message{{Role: "user", Content: completionPrompt}}, MaxTokens: 1, Priority: priority}
	err := s.untilAnswered(ctx, "a completion with a priority", s.cfg.CompletionTimeout, func(ctx context.Context) error {
		_, err := s.client.ChatStream(ctx, req, nil)
		return err
	})
	var apiErr *openai.APIError
	switch {
	case err != nil && errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest && strings.Contains(apiErr.Error(), "Priority scheduling is not enabled"):
		return fail("start vLLM with --scheduling-policy priority, which --yield-to-serving needs so that interactive requests go first, or run the workers without --yield-to-serving",
			"the backend refuses request priorities (sent %d, as --yield-to-serving workers do): %v", priority, err)
	case err != nil:
		return backendFailure(err)
	}
	return pass("the backend takes requests of priority %d (vLLM --scheduling-policy priority)", priority)
}

// backendFailure reports an error from the backend with its class
// (transient, permanent, auth, canceled) and what to do about it.
func backendFailure(err error) Result {
	class := openai.Classify(err)
	return fail(backendFix(err, class), "%s error: %v", class, err)
}

// backendFix says what to do about a backend error of class c.
func backendFix(err error, c openai.Class) string {
	var apiErr *openai.APIError
	answered := errors.As(err, &apiErr)
	switch {
	case c == openai.Auth:
		return "the backend refused the API key, or TLS does not match: check --api-key-file (or AERIE_API_KEY) and http:// versus https:// in --backend"
	case c == openai.Canceled:
		return "the backend did not answer in time: check that it is reachable from this host and not overloaded, or raise the timeout"
	case answered && apiErr.Status == http.StatusNotFound:
		return "nothing answers there, or the model name is unknown: is --backend the root URL of vLLM, SGLang or aerie sim, and is the run's model the one it serves?"
	case c == openai.Permanent:
		return "the backend refused the request as sent: read its message; check the run's model and sampling parameters"
	case answered && apiErr.Status == http.StatusServiceUnavailable:
		return "the backend is starting or its engine died: wait until /health answers 200, or read its log"
	case answered:
		return "the backend answered with an error: read its log"
	}
	return "start the backend or check --backend (vLLM answers once its model is loaded)"
}

package doctor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

func TestBackendDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Backend = "http://" + closedPort(t)
	rep := run(t, cfg)
	expect(t, rep, "backend", doctor.Fail, "transient error", "connection refused", "fix:start the backend or check --backend")
	for _, name := range []string{"model", "context-length", "completion"} {
		expect(t, rep, name, doctor.Skip)
	}
}

func TestWrongModelName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Backend = startSim(t, simulator.Config{Model: "other/model"})
	rep := run(t, cfg)
	expect(t, rep, "model", doctor.Fail,
		`wrong model name: the backend serves ["other/model"], the run's model is "test-model"`,
		`fix:point --backend at a server of "test-model"`, "fix:--model other/model")
	expect(t, rep, "completion", doctor.Skip, "not served")
}

func TestPromptLongerThanContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Backend = startSim(t, simulator.Config{Model: testModel, MaxModelLen: 1000})
	long := strings.Repeat("tell me more ", 400) // 5,200 bytes: about 1,300 tokens
	cfg.PromptsFile = writePrompts(t, b.dir,
		`{"id": "a", "prompt": "short"}`,
		``,
		`{"id": "long-one", "prompt": "`+long+`"}`,
		`not json`,
	)
	rep := run(t, cfg)
	expect(t, rep, "context-length", doctor.Fail,
		`1 of 2 prompts in prompts.jsonl do not fit "test-model": line 3 (id "long-one") about 1300 tokens (estimate: bytes/4) + max_tokens 64 > max_model_len 1000`,
		"1 line not valid prompts",
		"fix:serve the model with a larger --max-model-len")
}

func TestPromptNearContextLimitWarns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Backend = startSim(t, simulator.Config{Model: testModel, MaxModelLen: 1000})
	cfg.PromptsFile = writePrompts(t, b.dir, `{"id": "x", "prompt": "`+strings.Repeat("abcd", 880)+`"}`)
	rep := run(t, cfg)
	expect(t, rep, "context-length", doctor.Warn, "about 880 tokens", "within 10% of the limit")
}

// A backend that echoes the key (in an error body, in a model name) does
// not get it into the report.
func TestAPIKeyNeverPrinted(t *testing.T) {
	t.Parallel()
	const key = "sk-test-4f9a0c1d"
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(http.StatusOK)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error": {"message": "bad key %s", "type": "AuthenticationError", "code": 401}}`, r.Header.Get("Authorization"))
		}
	}))
	t.Cleanup(hs.Close)
	b := setup(t)
	cfg := b.cfg
	cfg.Backend, cfg.APIKey = hs.URL, key
	rep := run(t, cfg)
	expect(t, rep, "model", doctor.Fail, "auth error", "status 401", "fix:--api-key-file")
	if out := printed(rep); strings.Contains(out, key) {
		t.Fatalf("the API key is in the report:\n%s", out)
	}
}

// A backend that accepts connections and never answers fails within the
// check's time limit.
func TestHungBackendTimesOut(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(hs.Close)
	start := time.Now()
	rep := run(t, doctor.Config{Backend: hs.URL, CheckTimeout: 300 * time.Millisecond})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("doctor took %v with a 300ms check limit", took)
	}
	expect(t, rep, "backend", doctor.Fail, "canceled error", "deadline exceeded", "fix:did not answer in time")
}

// Before a run is produced there is no manifest; the model given is
// checked instead, so that aerie run fails before it queues anything.
func TestModelGivenWithoutManifest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Run = "not-produced-yet"
	cfg.Model = "wrong/model"
	rep := run(t, cfg)
	expect(t, rep, "manifest", doctor.Warn)
	expect(t, rep, "model", doctor.Fail,
		`wrong model name: the backend serves ["test-model"], the model given (no run manifest yet) is "wrong/model"`,
		"fix:pass --model test-model")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := doctor.Preflight(ctx, cfg); err == nil || !strings.Contains(err.Error(), "model: wrong model name") {
		t.Errorf("preflight with a model the backend does not serve: %v", err)
	}

	cfg.Model = testModel
	rep = run(t, cfg)
	expect(t, rep, "model", doctor.Pass, `"test-model" is served`)
	expect(t, rep, "completion", doctor.Pass, "the model given; no manifest yet")
}

// A --backend given with /v1 is probed at the server's root /health, and
// the report names what was probed.
func TestHealthNamesTheProbedURL(t *testing.T) {
	t.Parallel()
	var probed []string
	var mu sync.Mutex
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		probed = append(probed, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hs.Close)
	rep := run(t, doctor.Config{Backend: hs.URL + "/v1/"})
	r := expect(t, rep, "backend", doctor.Pass, hs.URL+"/health answered 200")
	if strings.Contains(r.Detail, "/v1/health") {
		t.Errorf("backend detail %q names /v1/health", r.Detail)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(probed) == 0 || probed[0] != "/health" {
		t.Errorf("probed %v, want /health first", probed)
	}
}

func TestRequireModel(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		served, model string
		want          []string // in the error; none: no error
	}{
		{`{"id": "a"}`, "a", nil},
		{`{"id": "a"}`, "b", []string{`http://backend does not serve model "b"; it serves ["a"]: pass --model a`}},
		{`{"id": "a"}, {"id": "c"}`, "b", []string{`it serves ["a" "c"]: pass --model <one of them>`}},
		{``, "b", []string{"serves no model"}},
	} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"object": "list", "data": [%s]}`, c.served)
		}))
		client, err := openai.New(openai.Config{BaseURL: hs.URL})
		if err != nil {
			t.Fatal(err)
		}
		err = doctor.RequireModel(context.Background(), client, "http://backend", c.model)
		hs.Close()
		switch {
		case c.want == nil && err != nil:
			t.Errorf("served [%s], model %q: %v", c.served, c.model, err)
		case c.want != nil && err == nil:
			t.Errorf("served [%s], model %q: no error", c.served, c.model)
		}
		for _, w := range c.want {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("served [%s], model %q: error %q does not contain %q", c.served, c.model, err, w)
			}
		}
	}

	// A backend that is down fails within the check's time limit, naming
	// the model it was checking.
	client, err := openai.New(openai.Config{BaseURL: "http://" + closedPort(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := doctor.RequireModel(context.Background(), client, "the backend", "b"); err == nil || !strings.Contains(err.Error(), `check that the backend serves model "b"`) {
		t.Errorf("backend down: %v", err)
	}

	// A backend that wants an API key says how to give it.
	client, err = openai.New(openai.Config{BaseURL: startSim(t, simulator.Config{Model: "b", APIKey: "sekret"})})
	if err != nil {
		t.Fatal(err)
	}
	if err := doctor.RequireModel(context.Background(), client, "the backend", "b"); err == nil || !strings.Contains(err.Error(), "status 401") || !strings.Contains(err.Error(), "--api-key-file") {
		t.Errorf("backend that wants a key: %v", err)
	}
}

// The test completion is asked with every parameter of the run, and a run
// that stores token ids fails when the backend does not return them (vLLM
// before 0.10.2 ignores return_token_ids), before any prompt is spent.
func TestCompletionAsksWithTheRunsParameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topK := 7
	m := schema.Manifest{Run: "ids", Model: testModel, ReturnTokenIDs: true, Producer: "test",
		Params: schema.Params{MaxTokens: 64, TopK: &topK, ChatTemplateKwargs: json.RawMessage(`{"thinking":false}`)}}
	brokertest.Queue(t, b.js, m, brokertest.Prompts(2))
	sim := startSim(t, simulator.Config{Model: testModel})
	var mu sync.Mutex
	var bodies []map[string]any
	var stripIDs bool
	proxyURL := simtest.ChatProxy(t, sim, func(body map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, body)
		if stripIDs {
			delete(body, "return_token_ids") // as a server that does not know it
		}
	})
	cfg := b.cfg
	cfg.Run, cfg.Backend, cfg.PromptsFile, cfg.YieldToServing = "ids", proxyURL, "", false
	rep := run(t, cfg)
	expect(t, rep, "completion", doctor.Pass)
	mu.Lock()
	if len(bodies) != 1 || bodies[0]["top_k"] != 7.0 || bodies[0]["return_token_ids"] != true || bodies[0]["max_tokens"] != 8.0 {
		t.Errorf("the test completion was asked with %v, want the run's top_k, return_token_ids and a small max_tokens", bodies)
	}
	stripIDs = true
	mu.Unlock()
	rep = run(t, cfg)
	expect(t, rep, "completion", doctor.Fail, "answered without the token ids", "fix:use vLLM 0.10.2 or later")
}

// Before a run has a manifest (aerie run's preflight, or doctor before
// produce), ReturnTokenIDs makes the test completion ask for token ids,
// and a backend that answers without them fails it.
func TestCompletionAsksForTokenIDsBeforeTheManifest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sim := startSim(t, simulator.Config{Model: testModel})
	proxyURL := simtest.ChatProxy(t, sim, func(body map[string]any) {
		delete(body, "return_token_ids") // as a server that does not know it
	})
	cfg := b.cfg
	cfg.Run, cfg.Backend, cfg.PromptsFile, cfg.Model = "not-produced", proxyURL, "", testModel
	expect(t, run(t, cfg), "completion", doctor.Pass)
	cfg.ReturnTokenIDs = true
	expect(t, run(t, cfg), "completion", doctor.Fail, "answered without the token ids", "fix:use vLLM 0.10.2 or later")
}

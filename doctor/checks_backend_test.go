package doctor_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/simulator"
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

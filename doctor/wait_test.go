package doctor_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/simulator"
)

// starting is a backend in front of a simulator that answers /health
// with 503 its first healthFails times, as vLLM does while it loads its
// model, and its first chatFails completions with status chatStatus. It
// returns its URL and the count of completions asked for.
func starting(t *testing.T, healthFails, chatFails int64, chatStatus int) (string, *atomic.Int64) {
	t.Helper()
	target, err := url.Parse(startSim(t, simulator.Config{Model: testModel}))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var health atomic.Int64
	chat := new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/health" && health.Add(1) <= healthFails:
			http.Error(w, "loading", http.StatusServiceUnavailable)
		case strings.HasSuffix(r.URL.Path, "/chat/completions") && chat.Add(1) <= chatFails:
			http.Error(w, `{"error": {"message": "busy"}}`, chatStatus)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, chat
}

// A backend that is starting, then sheds a request, is waited for within
// BackendWait, and the checks pass; without a wait they fail.
func TestBackendWaitForAStartingBackend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Backend, _ = starting(t, 2, 1, http.StatusServiceUnavailable)
	var logs logtest.Buffer
	cfg.BackendWait, cfg.Log = time.Minute, slog.New(slog.NewTextHandler(&logs, nil))
	rep := run(t, cfg)
	expect(t, rep, "backend", doctor.Pass)
	expect(t, rep, "completion", doctor.Pass)
	if !strings.Contains(logs.String(), "waiting for the backend") {
		t.Errorf("the wait was not logged:\n%s", logs.String())
	}

	cfg = b.cfg
	cfg.Backend, _ = starting(t, 2, 0, 0)
	expect(t, run(t, cfg), "backend", doctor.Fail, "503")
}

// A 429 of the test completion is waited out like a 503; a refused key
// is not waited for.
func TestBackendWaitRetriesLoadButNotARefusal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.BackendWait = time.Minute
	cfg.Backend, _ = starting(t, 0, 2, http.StatusTooManyRequests)
	expect(t, run(t, cfg), "completion", doctor.Pass)

	var asked *atomic.Int64
	cfg.Backend, asked = starting(t, 0, 1000, http.StatusUnauthorized)
	rep := run(t, cfg)
	expect(t, rep, "completion", doctor.Fail, "fix:the backend refused the API key")
	expect(t, rep, "priority", doctor.Fail, "fix:the backend refused the API key")
	if n := asked.Load(); n != 2 {
		t.Errorf("a refused key was asked %d times, want twice: once by the test completion, once by the priority check", n)
	}
}

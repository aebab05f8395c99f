package doctor_test

import (
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// starting is simtest.Starting in front of a simulator of the test's
// model.
func starting(t *testing.T, healthFails, chatFails int64, chatStatus int) (string, *atomic.Int64) {
	t.Helper()
	return simtest.Starting(t, startSim(t, simulator.Config{Model: testModel}), healthFails, chatFails, chatStatus)
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

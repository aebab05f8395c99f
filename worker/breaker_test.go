package worker_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// A server that sheds its first requests with 503 while its /health
// answers does not pause the worker: the requests are tried again, and
// every prompt is answered.
func TestQuick503sFromAnAnsweringServerDoNotPause(t *testing.T) {
	const prompts, shed = 8, 6
	b := setup(t, prompts, provision.Options{})
	backend, _ := simtest.Starting(t, simtest.Serve(t, simulator.Config{Model: "test-model", Speed: 100, ReasoningShare: -1}),
		0, shed, http.StatusServiceUnavailable)
	w, _ := b.start(t, worker.Config{Window: prompts, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}, backend)
	b.waitSettled(t, time.Minute)
	waitCounted(t, prompts, w)
	s := w.Stats()
	if s.Completed != prompts || s.DeadLettered != 0 {
		t.Errorf("completed %d, dead-lettered %d; want %d and 0", s.Completed, s.DeadLettered, prompts)
	}
	if s.Paused != 0 {
		t.Errorf("paused for %s after %d quick 503s from a server whose /health answered", s.Paused, shed)
	}
}

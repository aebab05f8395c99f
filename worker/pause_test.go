package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/metrics/metricstest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// Stats, the metrics and the heartbeats say the same of a run the worker
// does not pull: paused, and why; and that it pulls again once resumed.
func TestPausedRunSaidAlike(t *testing.T) {
	b := setupRun(t, schema.Manifest{Run: "a"}, 4, provision.Options{})
	brokertest.Queue(t, b.js, schema.Manifest{Run: "b", Schedule: schema.Schedule{Paused: true}}, brokertest.Prompts(4))
	beats := (&bundle{js: b.js, run: "b"}).heartbeats(t)
	_, url := newFakeLLM(t, &fakeLLM{})
	reg := prometheus.NewRegistry()
	w, _ := b.start(t, worker.Config{AllRuns: true, Window: 4, Metrics: reg}, url+"/v1/")
	b.settledRun(t, "a", 4, w)
	brokertest.Eventually(t, 10*time.Second, func() bool { _, ok := w.Stats().Runs["b"]; return ok }, "the worker to open the paused run")

	if s := w.Stats().Runs["b"]; s.Pulling || s.Paused != schema.PausedRun {
		t.Errorf("the paused run's stats: pulling %v, paused %q; want not pulling, %q", s.Pulling, s.Paused, schema.PausedRun)
	}
	if s := w.Stats().Runs["a"]; !s.Pulling || s.Paused != "" {
		t.Errorf("the other run's stats: pulling %v, paused %q; want pulling", s.Pulling, s.Paused)
	}
	f := metricstest.Gather(t, reg)
	for run, want := range map[string]float64{"a": 1, "b": 0} {
		if got, ok := f.Sum("aerie_worker_pulling", "run", run); !ok || got != want {
			t.Errorf("aerie_worker_pulling{run=%q} = %v (present %v), want %v", run, got, ok, want)
		}
	}
	brokertest.Eventually(t, 10*time.Second, func() bool { return beats.of(w.Name()) != nil }, "a heartbeat for the paused run")
	if hb := beats.of(w.Name()); !hb.Paused || hb.PausedReason != schema.PausedRun {
		t.Errorf("the paused run's heartbeat: paused %v, reason %q", hb.Paused, hb.PausedReason)
	}

	resume := false
	if _, _, err := runs.SetSchedule(context.Background(), b.js, "b", runs.ScheduleChange{Paused: &resume}, runs.Options{}); err != nil {
		t.Fatal(err)
	}
	b.settledRun(t, "b", 4, w)
	if s := w.Stats().Runs["b"]; !s.Pulling || s.Paused != "" {
		t.Errorf("the resumed run's stats: pulling %v, paused %q; want pulling", s.Pulling, s.Paused)
	}
}

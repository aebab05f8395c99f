package doctor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/schema"
)

// beat stores a heartbeat of worker on run, of aerie version with
// features (both empty: a worker older than feature checks).
func beat(t *testing.T, js jetstream.JetStream, run, worker, version string, features []string) {
	t.Helper()
	b, err := json.Marshal(schema.Heartbeat{Run: run, Worker: worker, Time: time.Now().UTC(), Window: 200, Version: version, Features: features})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, schema.HeartbeatSubject(run, worker), b); err != nil {
		t.Fatal(err)
	}
}

// doctor lists the fleet's versions and says which can serve the run: a
// worker older than feature checks cannot serve a run that needs any,
// one whose build lacks a feature cannot either.
func TestFleetVersionsAndWhetherTheyServeTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	brokertest.Queue(t, b.js, schema.Manifest{Run: "samples", Model: testModel, Samples: 3, SamplesPerMessage: 3, WrittenBy: "v2.0.0"}, nil)
	beat(t, b.js, "other", "old-1", "", nil)
	beat(t, b.js, "other", "new-1", "v2.0.0", schema.Implemented())
	beat(t, b.js, "other", "new-2", "v2.0.0", schema.Implemented())
	b.cfg.Run = "samples"
	expect(t, run(t, b.cfg), "fleet", doctor.Warn,
		"1 worker cannot serve run samples",
		"aerie older than feature checks: 1 worker CANNOT serve run samples (lacks samples, samples-in-message)",
		"aerie v2.0.0: 2 workers can serve run samples",
		"fix:upgrade them to aerie v2.0.0 or later")

	// A plain run (manifest version 1) is served by every version.
	b.cfg.Run = testRun
	expect(t, run(t, b.cfg), "fleet", doctor.Pass, "aerie older than feature checks: 1 worker can serve run "+testRun)

	// A run no worker of the fleet can serve fails.
	brokertest.Queue(t, b.js, schema.Manifest{Run: "future", Model: testModel, Needs: []string{"warp-drive"}, WrittenBy: "v3.0.0"}, nil)
	b.cfg.Run = "future"
	rep := run(t, b.cfg)
	expect(t, rep, "fleet", doctor.Fail, "no recent worker can serve run future, which needs warp-drive", "fix:upgrade the workers to aerie v3.0.0 or later")
	expect(t, rep, "manifest", doctor.Warn, "needs feature warp-drive, which aerie v3.0.0 has")
}

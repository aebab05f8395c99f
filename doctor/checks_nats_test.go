package doctor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

func TestNATSDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.NATSURL = "nats://" + closedPort(t)
	rep := run(t, cfg)
	if !rep.Failed() {
		t.Fatalf("NATS down did not fail:\n%s", printed(rep))
	}
	expect(t, rep, "nats", doctor.Fail, "cannot connect to "+cfg.NATSURL, "fix:start nats-server", "fix:check --nats")
	for _, name := range []string{"jetstream", "streams", "consumer", "manifest"} {
		expect(t, rep, name, doctor.Skip)
	}
	// The backend checks still run, with the backend's only model.
	expect(t, rep, "backend", doctor.Pass)
	expect(t, rep, "completion", doctor.Pass, "the backend's only model")
}

func TestStreamsMissingWarn(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	rep := run(t, doctor.Config{NATSURL: srv.ClientURL(), Run: testRun})
	if rep.Failed() {
		t.Fatalf("a broker before the first produce failed:\n%s", printed(rep))
	}
	expect(t, rep, "jetstream", doctor.Pass, "0 streams")
	expect(t, rep, "streams", doctor.Warn, "not created yet: AERIE_PROMPTS, AERIE_RESULTS, AERIE_DEAD, AERIE_EVENTS", "fix:aerie produce creates them")
	expect(t, rep, "consumer", doctor.Skip, "AERIE_PROMPTS does not exist yet")
	expect(t, rep, "manifest", doctor.Warn, "bucket aerie-runs does not exist", "fix:aerie produce --run r")
}

func TestStreamOfWrongShapeFails(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	_, js := brokertest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Someone created the results stream by hand with NATS's defaults:
	// every answer kept, a second answer to a prompt accepted.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: schema.ResultsStream, Subjects: []string{schema.ResultsRoot + ".>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	rep := run(t, doctor.Config{NATSURL: srv.ClientURL()})
	expect(t, rep, "streams", doctor.Fail,
		"AERIE_RESULTS: MaxMsgsPerSubject -1 (want 1), discard old (want new), DiscardNewPerSubject false (want true)",
		"fix:nats stream edit AERIE_RESULTS --max-msgs-per-subject 1 --discard new --discard-per-subject")
}

func TestManifestOfAnotherRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Run = "typo"
	rep := run(t, cfg)
	expect(t, rep, "manifest", doctor.Warn, `no manifest for run "typo"`, `runs there: ["r"]`)
	expect(t, rep, "consumer", doctor.Skip, "workers-typo does not exist yet")
	expect(t, rep, "model", doctor.Skip, "no run manifest to compare with")
}

// MaxAckPending against the workers' windows: below workers x window
// fails; a worker holds up to two prompts per slot (one generating, one
// being stored), so room for the windows alone warns; with --window auto
// the consumer must also hold what windows grown to --max-window hold.
func TestMaxAckPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		run           string
		maxAckPending int
		auto          bool
		maxWindow     int
		status        doctor.Status
		want          []string
	}{
		{"small", 100, false, 0, doctor.Fail, []string{
			"MaxAckPending 100 < 2 workers x 200 window = 400",
			"fix:nats consumer edit AERIE_PROMPTS workers-small --max-pending 800"}},
		{"snug", 600, false, 0, doctor.Warn, []string{
			"MaxAckPending 600 < 2 prompts per slot x 2 workers x 200 window = 800: slots wait while results are stored",
			"fix:nats consumer edit AERIE_PROMPTS workers-snug --max-pending 800"}},
		{"auto", 3000, true, 0, doctor.Warn, []string{
			"MaxAckPending 3000 < 2 prompts per slot x 2 workers x 1024 max window = 4096",
			"fix:nats consumer edit AERIE_PROMPTS workers-auto --max-pending 4096"}},
		{"auto512", 3000, true, 512, doctor.Pass, []string{
			"MaxAckPending 3000 >= 2 prompts per slot x 2 workers x 512 max window"}},
	} {
		queueRun(t, b.js, tc.run, 64, provision.Options{MaxAckPending: tc.maxAckPending})
		cfg := b.cfg
		cfg.Run, cfg.Workers, cfg.Window, cfg.AutoWindow, cfg.MaxWindow = tc.run, 2, 200, tc.auto, tc.maxWindow
		expect(t, run(t, cfg), "consumer", tc.status, tc.want...)
	}
}

func TestAckWaitTooShortAndUnlimitedDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queueRun(t, b.js, "short", 64, provision.Options{AckWait: 2 * time.Second, MaxDeliver: -1})
	cfg := b.cfg
	cfg.Run = "short"
	rep := run(t, cfg)
	expect(t, rep, "consumer", doctor.Fail,
		"AckWait 2s is under 3s: progress acks every 667ms race its timer",
		"MaxDeliver unlimited",
		fmt.Sprintf("fix:nats consumer edit AERIE_PROMPTS workers-short --wait 1m0s --max-deliver %d", provision.DefaultMaxDeliver))
}

func TestMaxDeliverBelowAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queueRun(t, b.js, "few", 64, provision.Options{MaxDeliver: 3})
	cfg := b.cfg
	cfg.Run = "few"
	rep := run(t, cfg)
	expect(t, rep, "consumer", doctor.Warn, "MaxDeliver 3 <= the run's max_attempts 5")
}

func TestJetStreamDisabled(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	rep := run(t, doctor.Config{NATSURL: ns.ClientURL(), Run: testRun})
	// NATS's own default max_payload, which aerie's servers raise.
	expect(t, rep, "nats", doctor.Warn, "max_payload 1.0 MiB", "fix:max_payload: 8MB")
	expect(t, rep, "jetstream", doctor.Fail, "not enabled", "fix:enable JetStream")
	expect(t, rep, "streams", doctor.Skip)
}

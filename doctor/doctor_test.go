package doctor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

const (
	testRun   = "r"
	testModel = "test-model"
)

// bundle is a healthy setup: a provisioned broker with a queued run and
// its consumer, a simulator serving the run's model, a data directory, a
// prompts file and a unit directory whose command exists. Tests break one
// part of it.
type bundle struct {
	cfg doctor.Config
	js  jetstream.JetStream
	dir string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv, _, js := brokertest.Provisioned(t)
	queueRun(t, js, testRun, 64, provision.Options{})
	dir := t.TempDir()
	return &bundle{
		js:  js,
		dir: dir,
		cfg: doctor.Config{
			NATSURL: srv.ClientURL(),
			Role:    auth.Admin,
			Run:     testRun,
			Backend: startSim(t, simulator.Config{Model: testModel, SchedulingPolicy: simulator.SchedulingPriority}),
			// Workers that yield to serving traffic, on a server that
			// runs the priority policy they need.
			YieldToServing: true,
			DataDir:        filepath.Join(dir, "data"),
			PromptsFile:    writePrompts(t, dir, `{"id": "a", "prompt": "short question"}`, `{"id": "b", "prompt": "another one"}`),
			Units:          writeUnit(t, dir, "aerie-work@.service", "ExecStart="+executableFile(t, dir)+" work --run %i"),
		},
	}
}

// queueRun writes a manifest for run and queues three prompts, then
// creates the run's consumer with opts.
func queueRun(t *testing.T, js jetstream.JetStream, run string, maxTokens int, opts provision.Options) {
	t.Helper()
	m := schema.Manifest{Run: run, Model: testModel, Params: schema.Params{MaxTokens: maxTokens}, Producer: "test"}
	brokertest.Queue(t, js, m, brokertest.Prompts(3))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := provision.WorkersConsumer(ctx, js, run, opts); err != nil {
		t.Fatal(err)
	}
}

// startSim serves a simulator on a loopback port until the test ends and
// returns its URL.
func startSim(t *testing.T, cfg simulator.Config) string {
	t.Helper()
	if cfg.Speed == 0 {
		cfg.Speed = 100
	}
	return simtest.Serve(t, cfg)
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func writePrompts(t *testing.T, dir string, lines ...string) string {
	t.Helper()
	p := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeUnit writes a unit file in dir/units and returns that directory.
func writeUnit(t *testing.T, dir, name string, service ...string) string {
	t.Helper()
	units := filepath.Join(dir, "units")
	if err := os.MkdirAll(units, 0o755); err != nil {
		t.Fatal(err)
	}
	text := "[Unit]\nDescription=test\n\n[Service]\n" + strings.Join(service, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(units, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return units
}

// executableFile creates an executable file and returns its path.
func executableFile(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "bin", "aerie")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, cfg doctor.Config) doctor.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return doctor.Run(ctx, cfg)
}

// printed renders a report, for failure messages.
func printed(rep doctor.Report) string {
	var b bytes.Buffer
	rep.Print(&b)
	return b.String()
}

// expect fails the test unless check name ended with st and its detail
// and fix contain the given texts ("fix:" prefixes a text for the fix).
func expect(t *testing.T, rep doctor.Report, name string, st doctor.Status, texts ...string) doctor.Result {
	t.Helper()
	r, ok := rep.Result(name)
	if !ok {
		t.Fatalf("no check %q in report:\n%s", name, printed(rep))
	}
	if r.Status != st {
		t.Errorf("%s: status %v, want %v:\n%s", name, r.Status, st, printed(rep))
	}
	for _, want := range texts {
		field, where := r.Detail, "detail"
		if fix, ok := strings.CutPrefix(want, "fix:"); ok {
			field, where, want = r.Fix, "fix", fix
		}
		if !strings.Contains(field, want) {
			t.Errorf("%s: %s %q does not contain %q", name, where, field, want)
		}
	}
	return r
}

var allChecks = []string{
	"nats", "permissions", "jetstream", "streams", "manifest", "consumer", "fleet", "backend", "model", "engine",
	"context-length", "completion", "priority", "data-dir", "disk-space", "store-space", "units", "extraction", "extract-space",
}

// Workers that yield to serving traffic send a priority, which vLLM
// refuses unless it runs --scheduling-policy priority: doctor says so,
// with the fix, and the preflight stops there.
func TestPriorityNeedsThePolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Backend = startSim(t, simulator.Config{Model: testModel})
	rep := run(t, b.cfg)
	expect(t, rep, "priority", doctor.Fail, "refuses request priorities (sent 10", "Priority scheduling is not enabled")
	for _, r := range rep.Checks {
		if r.Name == "priority" && !strings.Contains(r.Fix, "--scheduling-policy priority") {
			t.Errorf("fix %q does not name --scheduling-policy priority", r.Fix)
		}
	}
	b.cfg.YieldToServing = false
	expect(t, run(t, b.cfg), "priority", doctor.Skip, "do not yield")
}

func TestHealthySetupPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	beat(t, b.js, testRun, "w1", schema.BuildVersion(), schema.Implemented())
	rep := run(t, b.cfg)
	if rep.Failed() {
		t.Fatalf("healthy setup failed:\n%s", printed(rep))
	}
	if len(rep.Checks) != len(allChecks) {
		t.Fatalf("%d checks, want %d:\n%s", len(rep.Checks), len(allChecks), printed(rep))
	}
	for i, r := range rep.Checks {
		if r.Name != allChecks[i] {
			t.Errorf("check %d is %q, want %q", i, r.Name, allChecks[i])
		}
		// The extraction checks are a hidden-states run's.
		if want := doctor.Pass; r.Status != want && !(r.Status == doctor.Skip && strings.Contains(r.Detail, "not a hidden-states run")) {
			t.Errorf("%s: %v: %s", r.Name, r.Status, r.Detail)
		}
	}
	expect(t, rep, "consumer", doctor.Pass, "workers-r", "AckWait 1m0s (progress acks every 20s)", "MaxAckPending 20000 >= 1 worker x 200 window = 200", fmt.Sprintf("MaxDeliver %d,", provision.DefaultMaxDeliver), "ack explicit", "3 prompts waiting")
	expect(t, rep, "manifest", doctor.Pass, `model "test-model"`, "max_tokens 64", "temperature backend default", "max_attempts 5, on_length keep", "3 prompts")
	expect(t, rep, "model", doctor.Pass, `"test-model" is served with max_model_len 262144`)
	expect(t, rep, "context-length", doctor.Pass, "2 prompts", `line 1 (id "a")`, "estimate: bytes/4", "max_tokens 64")
	expect(t, rep, "completion", doctor.Pass, "TTFT", "reasoning returned")
	expect(t, rep, "disk-space", doctor.Pass, "3 answers (not yet done) x 64 max_tokens x 5 bytes")
	if _, err := os.Stat(filepath.Join(b.cfg.DataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data dir check left %s behind (err %v)", b.cfg.DataDir, err)
	}
}

func TestNothingGivenSkipsEverything(t *testing.T) {
	t.Parallel()
	rep := run(t, doctor.Config{})
	if rep.Failed() {
		t.Fatalf("empty config failed:\n%s", printed(rep))
	}
	for _, r := range rep.Checks {
		if r.Status != doctor.Skip || r.Detail == "" {
			t.Errorf("%s: %v %q, want SKIP with a reason", r.Name, r.Status, r.Detail)
		}
	}
}

func TestInvalidConfigFailsOneCheck(t *testing.T) {
	t.Parallel()
	rep := run(t, doctor.Config{Run: "no spaces allowed"})
	if len(rep.Checks) != 1 {
		t.Fatalf("want only the config check:\n%s", printed(rep))
	}
	expect(t, rep, "config", doctor.Fail, "run name")
}

func TestDefaultWindowIsTheWorkers(t *testing.T) {
	if doctor.DefaultWindow != worker.DefaultWindow {
		t.Fatalf("doctor.DefaultWindow %d, worker.DefaultWindow %d", doctor.DefaultWindow, worker.DefaultWindow)
	}
	if doctor.DefaultMaxWindow != worker.DefaultMaxWindow {
		t.Fatalf("doctor.DefaultMaxWindow %d, worker.DefaultMaxWindow %d", doctor.DefaultMaxWindow, worker.DefaultMaxWindow)
	}
}

func TestPreflight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := doctor.Preflight(ctx, b.cfg); err != nil {
		t.Fatalf("healthy preflight: %v", err)
	}

	cfg := b.cfg
	cfg.Backend = "http://" + closedPort(t)
	err := doctor.Preflight(ctx, cfg)
	var pe *doctor.PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("backend down: want a *PreflightError, got %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "1 check(s) failed: backend: transient error") || !strings.Contains(msg, "(fix: start the backend") {
		t.Errorf("error %q does not name the backend failure and its fix", msg)
	}
	var names []string
	for _, r := range pe.Report.Checks {
		names = append(names, r.Name)
	}
	want := "nats permissions jetstream manifest backend model engine completion priority data-dir disk-space extraction extract-space"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("preflight ran %q, want %q", got, want)
	}
}

func TestPrintFormat(t *testing.T) {
	t.Parallel()
	rep := doctor.Report{Checks: []doctor.Result{
		{Name: "nats", Status: doctor.Pass, Detail: "connected"},
		{Name: "model", Status: doctor.Fail, Detail: "wrong model name:\nthe backend serves [\"x\"]", Fix: "point --backend at a server of y"},
		{Name: "streams", Status: doctor.Warn, Detail: "not created yet", Fix: "aerie produce creates them"},
		{Name: "units", Status: doctor.Skip, Detail: "no unit files given (--units)", Fix: "never shown"},
		{Name: "data-dir", Status: doctor.Pass, Detail: "writable", Fix: "never shown"},
	}}
	var b bytes.Buffer
	rep.Print(&b)
	want := `PASS  nats      connected
FAIL  model     wrong model name: the backend serves ["x"]
      fix: point --backend at a server of y
WARN  streams   not created yet
      fix: aerie produce creates them
SKIP  units     no unit files given (--units)
PASS  data-dir  writable
2 passed, 1 failed, 1 warning, 1 skipped
`
	if b.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", b.String(), want)
	}
	if !rep.Failed() {
		t.Error("Failed() is false with a failed check")
	}
	rep.Checks[1].Status = doctor.Pass
	if rep.Failed() {
		t.Error("Failed() is true without a failed check")
	}
}

func TestConfigStringHidesKey(t *testing.T) {
	t.Parallel()
	cfg := doctor.Config{APIKey: "sk-very-secret", NATSURL: "nats://user:pw@127.0.0.1:4222"}
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg)} {
		if strings.Contains(s, "sk-very-secret") || strings.Contains(s, "pw@") {
			t.Errorf("secret printed: %s", s)
		}
	}
}

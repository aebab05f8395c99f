package main_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// exit waits for the process and returns its exit status.
func (p *proc) exit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		}
		t.Fatalf("%v: %v", p.cmd.Args, err)
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		t.Fatalf("%v did not finish within %v\nstderr:\n%s", p.cmd.Args, timeout, p.stderr.String())
	}
	return -1
}

// serveSim serves a simulator of model in this process until the test
// ends and returns its URL.
func serveSim(t *testing.T, model string) string {
	t.Helper()
	return simtest.Serve(t, simulator.Config{Model: model, Speed: 2000, OutputMedian: 100})
}

// aerie run takes its data directory from AERIE_DATA_DIR and its backend
// from AERIE_BACKEND, as the other commands do; without a backend it says
// that the answers are the simulator's.
func TestRunReadsEnvironment(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "30", "--out", prompts).wait(t, time.Minute)
	data := filepath.Join(dir, "env-data")
	backend := serveSim(t, "env/model")

	p := aerieEnv(t, bin, []string{"AERIE_DATA_DIR=" + data, "AERIE_BACKEND=" + backend},
		"run", "--run", "from-env", "--prompts", prompts, "--event-interval", "100ms")
	p.wait(t, 5*time.Minute)
	out := p.stdout.String()
	if want := "model        env/model at " + backend + "\n"; !strings.Contains(out, want) {
		t.Errorf("summary does not contain %q:\n%s", want, out)
	}
	lines := readLines(t, filepath.Join(data, "from-env", "completions.jsonl"))
	if len(lines) != 30 {
		t.Errorf("%s/from-env/completions.jsonl has %d lines, want 30", data, len(lines))
	}
	if _, err := os.Stat(filepath.Join(data, "nats")); err != nil {
		t.Errorf("the embedded NATS store is not in AERIE_DATA_DIR: %v", err)
	}

	p = aerieEnv(t, bin, []string{"AERIE_DATA_DIR=" + data},
		"run", "--run", "simulated", "--prompts", prompts, "--sim-speed", "2000", "--event-interval", "100ms")
	p.wait(t, 5*time.Minute)
	if out := p.stdout.String(); !strings.Contains(out, "(built-in simulator)") {
		t.Errorf("summary of a run against the simulator does not say so:\n%s", out)
	}
	if n := len(readLines(t, filepath.Join(data, "simulated", "completions.jsonl"))); n != 30 {
		t.Errorf("simulated run: %d lines, want 30", n)
	}
}

// aerie server keeps its store in AERIE_DATA_DIR, where aerie run keeps
// its own.
func TestServerStoreFromEnvironment(t *testing.T) {
	bin := buildAerie(t)
	data := filepath.Join(t.TempDir(), "env-data")
	addr := freeAddr(t)
	p := aerieEnv(t, bin, []string{"AERIE_DATA_DIR=" + data}, "server", "--listen", addr)
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	waitTCP(t, addr)
	if _, err := os.Stat(filepath.Join(data, "nats", "jetstream")); err != nil {
		t.Errorf("store not under AERIE_DATA_DIR/nats: %v\n%s", err, p.stderr.String())
	}
}

// Every command rejects an argument that is not a flag. Every address
// and directory points somewhere harmless, so that a command that
// accepted the argument would fail fast instead of starting.
func TestStrayArgument(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	nowhere := "nats://" + freeAddr(t)
	noBackend := "http://" + freeAddr(t)
	for _, args := range [][]string{
		{"run", "--run", "r", "--prompts", filepath.Join(dir, "p.jsonl"), "--data-dir", dir, "extra"},
		{"produce", "--run", "r", "--prompts", filepath.Join(dir, "p.jsonl"), "--nats", nowhere, "extra"},
		{"work", "--run", "r", "--nats", nowhere, "--backend", noBackend, "extra"},
		{"aggregate", "--run", "r", "--nats", nowhere, "--data-dir", dir, "extra"},
		{"doctor", "--nats", nowhere, "extra"},
		{"server", "--listen", freeAddr(t), "--store", filepath.Join(dir, "nats"), "extra"},
	} {
		p := aerie(t, bin, args...)
		if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), `unexpected argument "extra"`) {
			t.Errorf("%v: exit %d, stderr:\n%s", args, code, p.stderr.String())
		}
	}
}

// aerie produce --backend checks the model before anything is queued:
// a model the backend does not serve fails, naming the served ones,
// before produce even connects to NATS.
func TestProduceChecksModel(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "5", "--out", prompts).wait(t, time.Minute)
	backend := serveSim(t, "served/model")
	nowhere := "nats://" + freeAddr(t)

	p := aerie(t, bin, "produce", "--run", "r", "--prompts", prompts, "--model", "other/model", "--backend", backend, "--nats", nowhere)
	if code := p.exit(t, time.Minute); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, p.stderr.String())
	}
	want := `aerie produce: the backend at ` + backend + ` does not serve model "other/model"; it serves ["served/model"]: pass --model served/model`
	if got := p.stderr.String(); !strings.Contains(got, want) {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
	}

	// From AERIE_BACKEND, with a model it serves: checked, then validated.
	p = aerieEnv(t, bin, []string{"AERIE_BACKEND=" + backend}, "produce", "--run", "r", "--prompts", prompts, "--model", "served/model", "--dry-run")
	p.wait(t, time.Minute)
	if got := p.stdout.String(); !strings.Contains(got, "5 valid") {
		t.Errorf("dry run printed %q", got)
	}
	p = aerieEnv(t, bin, []string{"AERIE_BACKEND=" + backend}, "produce", "--run", "r", "--prompts", prompts, "--model", "other/model", "--dry-run")
	if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), `does not serve model "other/model"`) {
		t.Errorf("AERIE_BACKEND not checked: exit %d\n%s", code, p.stderr.String())
	}
}

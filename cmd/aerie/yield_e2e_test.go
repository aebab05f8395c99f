package main_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `aerie run --yield-to-serving` refuses, before queuing anything, a
// backend that would refuse its priorities, saying how to start it; on a
// backend with vLLM's priority scheduling it runs to the end.
func TestRunYieldToServing(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "20", "--out", prompts).wait(t, time.Minute)

	fcfs := aerie(t, bin, "run", "--run", "fcfs", "--prompts", prompts, "--data-dir", filepath.Join(dir, "fcfs"),
		"--yield-to-serving", "--sim-speed", "500")
	if code := fcfs.exit(t, 2*time.Minute); code == 0 || !strings.Contains(fcfs.stderr.String(), "--scheduling-policy priority") {
		t.Errorf("on a first-come-first-served backend: exit %d, want a failed preflight naming --scheduling-policy priority:\n%s", code, fcfs.stderr.String())
	}
	if n := countLines(filepath.Join(dir, "fcfs", "fcfs", "completions.jsonl")); n > 0 {
		t.Errorf("%d answers stored although the preflight failed", n)
	}

	prio := aerie(t, bin, "run", "--run", "prio", "--prompts", prompts, "--data-dir", filepath.Join(dir, "prio"),
		"--yield-to-serving", "--batch-priority", "5", "--sim-scheduling-policy", "priority", "--sim-speed", "500")
	if code := prio.exit(t, 2*time.Minute); code != 0 {
		t.Fatalf("on a backend with priority scheduling: exit %d:\n%s", code, prio.stderr.String())
	}
	if n := countLines(filepath.Join(dir, "prio", "prio", "completions.jsonl")); n != 20 {
		t.Errorf("%d answers, want 20", n)
	}
}

package main_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// aerie verify passes a hidden-states run's output as written, and
// names a file damaged since, exiting 1.
func TestVerifyHiddenStates(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	samples := filepath.Join(dir, "samples.jsonl")
	aerie(t, bin, "gen-prompts", "--task", "hidden-states", "--count", "40", "--vocab-size", "1000", "--out", samples).wait(t, time.Minute)
	data := filepath.Join(dir, "data")
	aerie(t, bin, "run", "--task", "hidden-states", "--run", "hs", "--prompts", samples, "--data-dir", data,
		"--layer-ids", "2,30", "--hidden-size", "64", "--sim-speed", "200", "--sim-vocab-size", "1000").wait(t, 2*time.Minute)

	verify := func() (string, error) {
		cmd := exec.Command(bin, "verify", "--run", "hs", "--data-dir", data)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := verify()
	if err != nil || !strings.Contains(out, "40 rows, 40 files verified, 0 failed; 0 missing, 0 differ, 0 extra") {
		t.Fatalf("a whole output: %v\n%s", err, out)
	}
	path := filepath.Join(data, "hs", "hidden_states", "hs_7.safetensors")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = verify()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "1 differ") || !strings.Contains(out, "sample 7: hidden_states/hs_7.safetensors") {
		t.Fatalf("a damaged file: %v\n%s", err, out)
	}
}

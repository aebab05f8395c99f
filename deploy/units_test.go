package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// exposureCeiling is, per unit, the highest `systemd-analyze security`
// exposure the unit may score, in tenths (the scale of --threshold): the
// score recorded in README.md. A change that loosens a unit's sandbox
// raises its score and fails TestUnitsSecurity; one that tightens it
// should lower the figure here and in README.md.
var exposureCeiling = map[string]int{
	"aerie-work@.service":      12,
	"aerie-aggregate@.service": 12,
	"nats-server.service":      13,
}

// units copies every unit of this directory into a temporary directory,
// a template under an instance name (systemd-analyze takes no template),
// with its binaries swapped for an executable that exists here, since
// verify checks that ExecStart= names one. It returns the copies' paths
// by the name of the unit they come from.
func units(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("*.service")
	if err != nil || len(names) == 0 {
		t.Fatalf("no unit in deploy/: %v", err)
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "stub")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/aerie "), []byte(stub+" "))
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/nats-server "), []byte(stub+" "))
		copyName := strings.Replace(name, "@.", "@test.", 1)
		path := filepath.Join(dir, copyName)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out[name] = path
	}
	return out
}

// systemdAnalyze finds systemd-analyze and checks that it scores unit
// files offline (systemd 250 and later), or skips the test saying why.
func systemdAnalyze(t *testing.T, unit string) string {
	t.Helper()
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the units' hardening is not checked (install systemd to check it)")
	}
	out, err := exec.Command(bin, "security", "--offline=true", unit).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Overall exposure level") {
		t.Skipf("this systemd-analyze cannot score a unit file offline (systemd 250 or later can): %v\n%s", err, out)
	}
	return bin
}

// Every unit parses without a warning: no misspelt directive, unknown
// system call group or bad value, which systemd would ignore silently.
func TestUnitsVerify(t *testing.T) {
	copies := units(t)
	var paths []string
	for _, p := range copies {
		paths = append(paths, p)
	}
	bin := systemdAnalyze(t, paths[0])
	cmd := exec.Command(bin, append([]string{"verify"}, paths...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if bytes.Contains(out, []byte("Failed to initialize manager")) || bytes.Contains(out, []byte("Failed to create")) && bytes.Contains(out, []byte("sysinit.target")) {
		t.Skipf("systemd-analyze verify cannot load units on this machine:\n%s", out)
	}
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", strings.Join(paths, " "), err, out)
	}
}

var exposure = regexp.MustCompile(`Overall exposure level for \S+: ([0-9]+)\.([0-9])`)

// No unit's exposure score rises above the one recorded: the sandbox of
// every unit stays as tight as README.md says.
func TestUnitsSecurity(t *testing.T) {
	copies := units(t)
	var bin string
	for name, path := range copies {
		if bin == "" {
			bin = systemdAnalyze(t, path)
		}
		ceiling, ok := exposureCeiling[name]
		if !ok {
			t.Errorf("%s has no exposure ceiling: score it with systemd-analyze security --offline=true and add it to exposureCeiling and README.md", name)
			continue
		}
		out, err := exec.Command(bin, "security", "--offline=true", "--threshold="+strconv.Itoa(ceiling), path).CombinedOutput()
		m := exposure.FindSubmatch(out)
		if m == nil {
			t.Errorf("%s: no exposure level in systemd-analyze's output: %v\n%s", name, err, out)
			continue
		}
		whole, _ := strconv.Atoi(string(m[1]))
		tenth, _ := strconv.Atoi(string(m[2]))
		score := whole*10 + tenth
		t.Logf("%s: exposure %d.%d (ceiling %d.%d)", name, whole, tenth, ceiling/10, ceiling%10)
		if err != nil || score > ceiling {
			t.Errorf("%s: exposure %d.%d is above its ceiling %d.%d (exit: %v): a sandbox directive was loosened or removed\n%s", name, whole, tenth, ceiling/10, ceiling%10, err, out)
		}
	}
}

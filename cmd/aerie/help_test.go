package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A failing command's message names the command once: "aerie produce:
// <what went wrong>", not "aerie produce: produce: ...".
func TestErrorsNameTheCommandOnce(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"produce", "--run", "r", "--prompts", filepath.Join(dir, "missing.jsonl"), "--dry-run"},
		{"produce", "--run", "r", "--prompts", filepath.Join(dir, "missing.jsonl"), "--dry-run", "--on-length", "sometimes"},
		{"doctor", "--workers", "-1"},
		{"gen-prompts", "--out", filepath.Join(dir, "p.jsonl"), "stray"},
	} {
		p := aerie(t, bin, args...)
		if code := p.exit(t, time.Minute); code != 1 {
			t.Errorf("%v: exit status %d, want 1\n%s", args, code, p.stderr.String())
			continue
		}
		msg := strings.TrimSpace(p.stderr.String())
		msg = msg[strings.LastIndex(msg, "\naerie ")+1:]
		rest, ok := strings.CutPrefix(msg, "aerie "+args[0]+": ")
		if !ok {
			t.Errorf("%v: message %q does not begin with the command", args, msg)
			continue
		}
		if strings.HasPrefix(rest, args[0]) {
			t.Errorf("%v: message names the command twice: %q", args, msg)
		}
	}
}

// aerie help <command> is aerie <command> -h; --version, -version and
// version print the version.
func TestHelpAndVersion(t *testing.T) {
	bin := buildAerie(t)
	h := aerie(t, bin, "produce", "-h")
	if code := h.exit(t, time.Minute); code != 0 {
		t.Fatalf("aerie produce -h: exit %d", code)
	}
	p := aerie(t, bin, "help", "produce")
	if code := p.exit(t, time.Minute); code != 0 {
		t.Errorf("aerie help produce: exit %d", code)
	}
	if got := p.stderr.String(); got != h.stderr.String() || !strings.Contains(got, "Usage: aerie produce") || !strings.Contains(got, "-backend") {
		t.Errorf("aerie help produce printed:\n%s\nwant what aerie produce -h prints:\n%s", got, h.stderr.String())
	}

	p = aerie(t, bin, "help", "nonsense")
	if code := p.exit(t, time.Minute); code != 2 {
		t.Errorf("aerie help nonsense: exit %d, want 2", code)
	}
	if got := p.stderr.String(); !strings.Contains(got, `unknown command "nonsense"`) || !strings.Contains(got, "gen-prompts") {
		t.Errorf("aerie help nonsense does not list the commands:\n%s", got)
	}

	p = aerie(t, bin, "version", "extra")
	if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), `unexpected argument "extra"`) {
		t.Errorf("aerie version extra: exit %d, stderr:\n%s", code, p.stderr.String())
	}
	for _, arg := range []string{"--version", "-version", "version"} {
		p := aerie(t, bin, arg)
		if code := p.exit(t, time.Minute); code != 0 || p.stdout.String() != fmt.Sprintf("aerie %s\n", testVersion) {
			t.Errorf("aerie %s: exit %d, printed %q", arg, code, p.stdout.String())
		}
	}
}

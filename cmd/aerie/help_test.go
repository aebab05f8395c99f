package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
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
		{"auth"},
		{"auth", "create"},
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

// Every command listed by aerie help has help of its own: aerie help
// <command> and aerie <command> -h exit 0 and print its usage.
func TestEveryCommandHasHelp(t *testing.T) {
	bin := buildAerie(t)
	list := aerie(t, bin, "help")
	if code := list.exit(t, time.Minute); code != 0 {
		t.Fatalf("aerie help: exit %d", code)
	}
	_, commands, _ := strings.Cut(list.stderr.String(), "Commands:\n")
	n := 0
	for _, line := range strings.Split(commands, "\n") {
		fields := strings.Fields(line)
		if !strings.HasPrefix(line, "  ") || len(fields) == 0 {
			continue
		}
		name := fields[0]
		n++
		for _, args := range [][]string{{"help", name}, {name, "-h"}} {
			p := aerie(t, bin, args...)
			if code := p.exit(t, time.Minute); code != 0 || !strings.Contains(p.stderr.String(), "Usage: aerie "+name) {
				t.Errorf("aerie %s: exit %d, want 0 and its usage:\n%s", strings.Join(args, " "), code, p.stderr.String())
			}
		}
	}
	if n < 10 {
		t.Fatalf("aerie help listed %d commands:\n%s", n, list.stderr.String())
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
		want := fmt.Sprintf("aerie %s\nfeatures: %s\n", testVersion, strings.Join(schema.Implemented(), " "))
		if code := p.exit(t, time.Minute); code != 0 || p.stdout.String() != want {
			t.Errorf("aerie %s: exit %d, printed %q", arg, code, p.stdout.String())
		}
	}
}

// aerie export is a listed command; it writes a run's answers from its
// files, says what it wrote and left out, and refuses an unknown format
// naming the ones it has.
func TestExportCommand(t *testing.T) {
	bin := buildAerie(t)
	p := aerie(t, bin, "help")
	if code := p.exit(t, time.Minute); code != 0 || !strings.Contains(p.stderr.String(), "  export ") {
		t.Errorf("aerie help does not list export (exit %d):\n%s", code, p.stderr.String())
	}
	h := aerie(t, bin, "help", "export")
	if code := h.exit(t, time.Minute); code != 0 || !strings.Contains(h.stderr.String(), `"<id>#<k>"`) || !strings.Contains(h.stderr.String(), "-include-truncated") {
		t.Errorf("aerie help export (exit %d):\n%s", code, h.stderr.String())
	}

	dir := t.TempDir()
	runDir := filepath.Join(dir, "demo")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	line := `{"id":"p1","sample":0,"messages":[{"role":"user","content":"hi"}],"reasoning":"r","content":"hello","finish_reason":"stop","turns":1}` + "\n" +
		`{"id":"p2","sample":0,"messages":[{"role":"user","content":"go on"}],"reasoning":"","content":"and on","finish_reason":"length","truncated":true,"turns":1}` + "\n"
	if err := os.WriteFile(filepath.Join(runDir, "completions.jsonl"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "sf.jsonl")
	p = aerie(t, bin, "export", "--run", "demo", "--data-dir", dir, "--format", "specforge", "--out", out)
	if code := p.exit(t, time.Minute); code != 0 || !strings.Contains(p.stderr.String(), "1 row written") || !strings.Contains(p.stderr.String(), "1 truncated") {
		t.Errorf("aerie export: exit %d\n%s", code, p.stderr.String())
	}
	want := `{"id":"p1","conversations":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello","reasoning_content":"r"}],"status":"success"}` + "\n"
	if b, _ := os.ReadFile(out); string(b) != want {
		t.Errorf("wrote %q, want %q", b, want)
	}
	if b, err := os.ReadFile(out + ".export.json"); err != nil || !strings.Contains(string(b), `"rows_written": 1`) {
		t.Errorf("summary beside the output: %v\n%s", err, b)
	}

	// Bad input: a clear error, and nothing written.
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--format", "specforge", "--out", filepath.Join(dir, "a.jsonl"), "--drop", "truncated,long"}, `--drop "long": not a filter; use any of truncated,empty,reasoning-only,no-reasoning,non-target-turns`},
		{[]string{"--format", "specforge", "--out", filepath.Join(dir, "b.jsonl"), "--max-length", "0"}, "--max-length 0: the trainer's sequence length in tokens, from 1"},
		{[]string{"--format", "parquet", "--out", notDir}, "is a file: format parquet writes a directory"},
		{[]string{"--format", "speculators", "--out", filepath.Join(dir, "c.jsonl")}, "produce the run with --return-token-ids"},
	} {
		p = aerie(t, bin, append([]string{"export", "--run", "demo", "--data-dir", dir}, c.args...)...)
		if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), c.says) {
			t.Errorf("%v: exit %d, want 1 saying %q:\n%s", c.args, code, c.says, p.stderr.String())
		}
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "demo file sf.jsonl sf.jsonl.export.json" {
		t.Errorf("left behind: %v", names)
	}
	p = aerie(t, bin, "export", "--run", "demo", "--data-dir", dir, "--format", "alpaca", "--out", out)
	if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), "sharegpt") {
		t.Errorf("unknown format: exit %d\n%s", code, p.stderr.String())
	}
}

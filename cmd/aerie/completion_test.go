package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker"
)

// completions loads the binary's completion script into shell and
// returns what it offers for the command line words, the last being the
// word completed. zsh's completion builtins are stood in for by
// functions that print what they are given.
func completions(t *testing.T, shell, bin, dir string, env []string, words ...string) []string {
	t.Helper()
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	var script string
	switch shell {
	case "bash":
		script = `source <(aerie completion bash)
COMP_WORDS=(` + strings.Join(quoted, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_aerie; printf '%s\n' "${COMPREPLY[@]}"`
	case "zsh":
		script = `compdef() { :; }; compadd() { shift; printf '%s\n' "$@"; }; _files() { print -r -- '<files>'; }
source <(aerie completion zsh)
words=(` + strings.Join(quoted, " ") + `); CURRENT=${#words}
_aerie`
	}
	cmd := exec.Command(shell, "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s completion of %q: %v\n%s", shell, words, err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			got = append(got, l)
		}
	}
	return got
}

// The completion scripts offer commands, flags, the server's run names
// and paths, in bash and in zsh.
func TestShellCompletion(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	srv, err := broker.Start(broker.Config{StoreDir: filepath.Join(dir, "nats"), Port: -1, SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	env := []string{"AERIE_NATS_URL=" + srv.ClientURL(), "AERIE_LOG_LEVEL=warn", "AERIE_BACKEND="}
	if out, err := runBin(t, bin, dir, env, "gen-prompts", "--count", "5", "--out", "prompts.jsonl"); err != nil {
		t.Fatalf("gen-prompts: %v\n%s", err, out)
	}
	for _, run := range []string{"kimi-25k", "qwen-1m"} {
		if out, err := runBin(t, bin, dir, env, "produce", "--run", run, "--prompts", "prompts.jsonl", "--model", "m"); err != nil {
			t.Fatalf("produce: %v\n%s", err, out)
		}
	}
	for _, shell := range []string{"bash", "zsh"} {
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("no %s here: its completion is not tried (make test installs zsh with apt-get as root)", shell)
			continue
		}
		t.Run(shell, func(t *testing.T) {
			check := func(want []string, words ...string) {
				t.Helper()
				got := completions(t, shell, bin, dir, env, words...)
				for _, w := range want {
					if !slices.Contains(got, w) {
						t.Errorf("%q offers %q, want %q among them", words, got, w)
					}
				}
			}
			check([]string{"run", "runs"}, "aerie", "ru")
			check([]string{"--prompts"}, "aerie", "run", "--prom")
			check([]string{"--window", "--all-runs"}, "aerie", "work", "--")
			check([]string{"kimi-25k", "qwen-1m"}, "aerie", "status", "--run", "")
			check([]string{"ls", "rm"}, "aerie", "runs", "")
			check([]string{"bash", "zsh"}, "aerie", "completion", "")
			files := []string{"prompts.jsonl"}
			if shell == "zsh" {
				files = []string{"<files>"}
			}
			check(files, "aerie", "produce", "--prompts", "pro")
		})
	}
	// A server that does not answer offers no run names (and no error).
	if got := completions(t, "bash", bin, dir, []string{"AERIE_NATS_URL=nats://127.0.0.1:1"}, "aerie", "status", "--run", ""); len(got) != 0 {
		t.Errorf("with no server: %q", got)
	}
}

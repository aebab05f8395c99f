//go:build linux

package main_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
)

// inspectMarker comes before the README's fenced block of nats CLI
// commands that this test runs.
const inspectMarker = "<!-- readme-test: inspect-commands -->"

// natsCLIVersion is the natscli the README's commands are written for
// (make test installs it in bin/tools).
const natsCLIVersion = "v0.5.0"

// What each README command must print, in order: decoded JSON fields of
// the run below.
var inspectWant = [][]string{
	{`"id": "q0000042"`, `"finish_reason": "stop"`, `"id": "q0000007"`},
	{`"id": "q-too-long"`, `"reason": "permanent"`, `"status": 400`},
	{`"id": "q0000042"`, `"finish_reason": "stop"`, `"messages": [`},
	{`"id": "q0000042"`, `"source": "prompts.jsonl:1"`},
	{`"id":"q0000042"`, `"id":"q0000007"`, `"finish_reason":"stop"`},
}

// The README's inspection commands, run as written with the real nats CLI
// and `aerie decode` (freshly built, first on PATH) against a finished run
// with two results and one dead letter.
func TestInspectREADME(t *testing.T) {
	natsCLI := findNatsCLI(t)
	bin := buildAerie(t)
	cmds := readmeInspectCommands(t)
	if len(cmds) != len(inspectWant) {
		t.Fatalf("README has %d inspection commands, the test expects %d: update inspectWant", len(cmds), len(inspectWant))
	}

	run, url := inspectRun(t)
	home := t.TempDir() // no nats CLI contexts of the user's
	env := append(os.Environ(),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+filepath.Dir(natsCLI)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"NATS_URL="+url, "NATS_CONTEXT=", "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	for i, line := range cmds {
		line = strings.ReplaceAll(line, "<run>", run)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Env = env
		var out []byte
		var err error
		if strings.HasPrefix(line, "nats stream view ") {
			out, err = runOnTerminal(ctx, cmd) // it pages, and refuses to run without a terminal
		} else {
			out, err = cmd.CombinedOutput()
		}
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", line, err, out)
			continue
		}
		if bytes.Contains(out, []byte("Error while translating")) {
			t.Errorf("%s: a message did not decode:\n%s", line, out)
		}
		for _, w := range inspectWant[i] {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("%s: output lacks %s:\n%s", line, w, out)
			}
		}
	}
}

// findNatsCLI returns the nats CLI of bin/tools (make test installs it
// there), else the one on PATH; the test skips without one.
func findNatsCLI(t testing.TB) string {
	path, err := filepath.Abs(filepath.Join("..", "..", "bin", "tools", "nats"))
	if err == nil {
		if _, err = os.Stat(path); err != nil {
			path, err = exec.LookPath("nats")
		}
	}
	if err != nil {
		t.Skipf("no nats CLI in bin/tools or on PATH (GOBIN=$PWD/bin/tools go install github.com/nats-io/natscli/nats@%s, or make test): the README's inspection commands go untested", natsCLIVersion)
	}
	out, err := exec.Command(path, "--version").Output()
	if got := strings.TrimSpace(string(out)); err != nil || got != natsCLIVersion {
		t.Logf("%s is natscli %q (%v); the README's commands are written for %s", path, got, err, natsCLIVersion)
	}
	return path
}

// readmeInspectCommands returns the lines of the fenced block after
// inspectMarker in README.md.
func readmeInspectCommands(t *testing.T) []string {
	readme := readDocs(t)
	_, after, ok := strings.Cut(readme, inspectMarker)
	if !ok {
		t.Fatalf("README.md has no %q marker", inspectMarker)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("README.md: no ```sh block after the inspection marker")
	}
	var cmds []string
	for line := range strings.SplitSeq(block, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// inspectRun runs three prompts through the pipeline with the simulator:
// two are answered, one is too long for the model's context and is
// dead-lettered. It returns the run's name and the URL of a NATS server
// on the run's store, up until the test ends.
func inspectRun(t *testing.T) (run, url string) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	long := strings.Repeat("word ", 3000)
	lines := fmt.Sprintf(`{"id":"q0000042","messages":[{"role":"user","content":"What is a B-tree?"}]}
{"id":"q0000007","messages":[{"role":"user","content":"What is a heap?"}]}
{"id":"q-too-long","messages":[{"role":"user","content":%q}]}
`, long)
	if err := os.WriteFile(prompts, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	run = "inspect"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := pipeline.Run(ctx, pipeline.Config{
		Run: run, PromptsFile: prompts, DataDir: dir,
		Sim:    simulator.Config{Speed: 1000, MaxModelLen: 2048, OutputMedian: 40},
		Params: schema.Params{MaxTokens: 256},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done || sum.Completed != 2 || sum.Failed != 1 {
		t.Fatalf("run: %d completed, %d failed, done %v; want 2, 1, true", sum.Completed, sum.Failed, sum.Done)
	}
	srv, err := broker.Start(broker.Config{StoreDir: filepath.Join(dir, "nats"), Host: "127.0.0.1", SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return run, srv.ClientURL()
}

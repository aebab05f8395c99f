package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// The whole pipeline as separate processes, the way it runs in
// production: a broker, a backend, two workers (one with --window auto),
// an aggregator and a producer, each its own aerie process. AERIE_E2E_PROMPTS sets the size
// (default 2,000).
func TestSeparateProcesses(t *testing.T) {
	bin := buildAerie(t)
	n := 2000
	if s := os.Getenv("AERIE_E2E_PROMPTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("AERIE_E2E_PROMPTS=%q", s)
		}
	}
	dir := t.TempDir()
	natsAddr, simAddr := freeAddr(t), freeAddr(t)
	natsURL := "nats://" + natsAddr
	data := filepath.Join(dir, "data")
	prompts := filepath.Join(dir, "prompts.jsonl")
	run := "e2e"

	aerie(t, bin, "gen-prompts", "--count", strconv.Itoa(n), "--out", prompts).wait(t, time.Minute)
	start(t, bin, "server", "--listen", natsAddr, "--store", filepath.Join(data, "nats"))
	start(t, bin, "sim", "--listen", simAddr, "--speed", "500", "--output-median", "300")
	waitTCP(t, natsAddr)
	waitTCP(t, simAddr)

	began := time.Now()
	// One worker with a fixed window, as the compose demo runs it, and
	// one sizing its window from the backend's metrics, as the systemd
	// and Kubernetes workers do.
	work := func(name, window string) *proc {
		return start(t, bin, "work", "--nats", natsURL, "--run", run, "--backend", "http://"+simAddr, "--window", window, "--name", name, "--grace", "2s")
	}
	aggregate := func() *proc {
		return start(t, bin, "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "500ms")
	}
	w1 := work("w1", "100")
	work("w2", "auto")
	agg := aggregate()
	out := aerie(t, bin, "produce", "--nats", natsURL, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5", "--max-tokens", "8192", "--ack-wait", "3s")
	out.wait(t, 5*time.Minute)
	if !strings.Contains(out.stdout.String(), fmt.Sprintf("%d newly queued, 0 already queued", n)) {
		t.Errorf("first produce said: %s", out.stdout.String())
	}

	// A third of the way in, kill -9 a worker and the aggregator, then
	// start them again: nothing may be lost or written twice.
	completions := filepath.Join(data, run, "completions.jsonl")
	brokertest.Eventually(t, 5*time.Minute, func() bool { return countLines(completions) >= n/3 }, "a third of the output")
	w1.kill(t)
	agg.kill(t)
	t.Logf("killed worker w1 and the aggregator with %d lines written", countLines(completions))
	work("w1-restarted", "auto")
	agg = aggregate()
	agg.wait(t, 10*time.Minute)
	wall := time.Since(began)

	lines := readLines(t, completions)
	ids := map[string]bool{}
	truncated := 0
	for _, l := range lines {
		ids[l.ID] = true
		if l.FinishReason == "length" {
			truncated++ // cut at --max-tokens, possibly while still reasoning
			continue
		}
		if l.Reasoning == "" || l.Content == "" {
			t.Errorf("%s: empty reasoning or content", l.ID)
		}
	}
	if len(lines) != n || len(ids) != n {
		t.Fatalf("completions.jsonl: %d lines, %d distinct ids, want %d", len(lines), len(ids), n)
	}
	t.Logf("%d prompts through separate processes in %v (%.0f prompts/s), %d truncated at max_tokens", n, wall.Round(time.Millisecond), float64(n)/wall.Seconds(), truncated)

	again := aerie(t, bin, "produce", "--nats", natsURL, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5", "--max-tokens", "8192")
	again.wait(t, 5*time.Minute)
	if !strings.Contains(again.stdout.String(), fmt.Sprintf("0 newly queued, %d already queued", n)) {
		t.Errorf("second produce said: %s", again.stdout.String())
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(n) {
		t.Errorf("prompts stream holds %d messages after producing twice, want %d", got, n)
	}
}

type outputLine struct {
	ID           string `json:"id"`
	Reasoning    string `json:"reasoning"`
	Content      string `json:"content"`
	FinishReason string `json:"finish_reason"`
}

func readLines(t *testing.T, path string) []outputLine {
	t.Helper()
	return readJSONL[outputLine](t, path)
}

// readJSONL decodes every line of a JSONL file as a T.
func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l T
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: bad line: %v", path, err)
		}
		out = append(out, l)
	}
	return out
}

type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan error
}

// testVersion is the version the test binary is built with.
const testVersion = "v0.0.0-e2e"

// built is the binary under test, built once for every test that needs
// it, in a directory TestMain removes.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	if args := os.Getenv(plainClientEnv); args != "" {
		// A process of BenchmarkCPUPerPrompt: the plain client.
		if err := runPlainClient(args); err != nil {
			fmt.Fprintln(os.Stderr, "plain client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildAerie builds the aerie binary (once) and returns its path; with
// -short it skips the test instead.
func buildAerie(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "aerie-e2e-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "aerie")
		out, err := exec.Command("go", "build", "-ldflags", "-X github.com/aerie-dev/aerie/schema.buildVersion="+testVersion, "-o", built.bin, ".").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("build: %v", built.err)
	}
	return built.bin
}

// aerie starts the binary and returns without waiting.
func aerie(t testing.TB, bin string, args ...string) *proc {
	t.Helper()
	return aerieEnv(t, bin, nil, args...)
}

// aerieEnv starts the binary in an environment without any AERIE_
// variable of the test's own but env (KEY=value), and returns without
// waiting.
func aerieEnv(t testing.TB, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AERIE_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, "AERIE_LOG_LEVEL=warn")
	p.cmd.Env = append(p.cmd.Env, env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p
}

// start runs a long-lived process, stopped with SIGTERM when the test
// ends.
func start(t testing.TB, bin string, args ...string) *proc {
	t.Helper()
	return startEnv(t, bin, nil, args...)
}

// startEnv is start in the environment of aerieEnv.
func startEnv(t testing.TB, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := aerieEnv(t, bin, env, args...)
	t.Cleanup(func() {
		select {
		case err := <-p.done:
			p.done <- err
			return // already exited
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for Cleanup
		if err != nil {
			t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, err, p.stdout.String(), p.stderr.String())
		}
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		t.Fatalf("%v did not finish within %v\nstderr:\n%s", p.cmd.Args, timeout, p.stderr.String())
	}
}

// kill ends the process with SIGKILL: no clean-up of any kind.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-p.done
	p.done <- err
}

func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

func freeAddr(t testing.TB) string { return brokertest.FreeAddr(t) }

func waitTCP(t testing.TB, addr string) {
	t.Helper()
	brokertest.Eventually(t, 20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "%s to accept connections", addr)
}

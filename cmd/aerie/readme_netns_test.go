//go:build linux

package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// netns is a network namespace of its own, with only a loopback
// interface: every address of 127.0.0.0/8 is on it, and no port is taken
// by anything outside, so the README's fixed ports (4222, 6222, 8000)
// are free whatever else the machine runs.
type netns struct {
	name string
	env  []string // of every process, after the test's own
	dir  string   // logs of the processes started
}

// netnsPrefix starts the name of every namespace the README tests make.
const netnsPrefix = "aerie-readme-"

// newNetns makes a namespace, removed when the test ends; it skips the
// test where the machine does not allow one (not root, no ip command).
func newNetns(t *testing.T, label string, env []string) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the README's commands use fixed ports, so they run in a network namespace of their own, which takes root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command for a network namespace (Debian: iproute2)")
	}
	clearStaleNetns(t)
	n := &netns{name: fmt.Sprintf("%s%d-%s", netnsPrefix, os.Getpid(), label), env: env, dir: t.TempDir()}
	if out, err := exec.Command("ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { n.keepLogs(t) })
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Logf("ip netns del %s: %v: %s", n.name, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", n.name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("loopback up in %s: %v: %s", n.name, err, out)
	}
	return n
}

// keepLogs copies the whole output of every process the test started to
// $AERIE_TEST_ARTIFACTS/<test>/ when the test failed: its message shows
// only their last lines. It runs after the processes were stopped (clean-ups
// run last first).
func (n *netns) keepLogs(t *testing.T) {
	root := os.Getenv("AERIE_TEST_ARTIFACTS")
	if !t.Failed() || root == "" {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(n.dir, "*.log"))
	to := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Logf("keep the processes' logs: %v", err)
		return
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err == nil {
			err = os.WriteFile(filepath.Join(to, filepath.Base(l)), b, 0o644)
		}
		if err != nil {
			t.Logf("keep %s: %v", l, err)
		}
	}
	t.Logf("the processes' logs are in %s", to)
}

// keepState writes, with env (a script of exports) first, what the cluster says of run's streams and consumers
// beside the logs keepLogs keeps, when the test failed: the state at the
// moment of the failure tells a message lost from one never sent.
func (n *netns) keepState(t *testing.T, dir, env, run string) {
	if !t.Failed() || os.Getenv("AERIE_TEST_ARTIFACTS") == "" {
		return
	}
	var b strings.Builder
	for _, c := range []string{
		"nats server report jetstream", "nats stream report",
		"nats consumer report AERIE_PROMPTS", "nats consumer report AERIE_RESULTS",
		"nats consumer report AERIE_DEAD", "nats consumer report AERIE_ADVISORIES",
		"nats consumer info AERIE_RESULTS aggregator-" + run,
		"aerie status --nkey " + dir + "/etc-aerie/admin.nk --run " + run,
	} {
		out, err := n.run(dir, env+c, 30*time.Second)
		fmt.Fprintf(&b, "$ %s\n%s(%v)\n\n", c, out, err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "state.log"), []byte(b.String()), 0o600); err != nil {
		t.Logf("keep the cluster's state: %v", err)
	}
}

// clearStaleNetns removes namespaces left by README tests whose process
// is gone (killed before its clean-up ran).
func clearStaleNetns(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, netnsPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		if err := exec.Command("ip", "netns", "del", name).Run(); err == nil {
			t.Logf("removed %s, left by a README test that was killed", name)
		}
	}
}

// command is script run by bash in the namespace, in dir.
func (n *netns) command(ctx context.Context, dir, script string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.name, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = n.env
	return cmd
}

// run runs script to its end, within a deadline, and returns its
// combined output and exit error.
func (n *netns) run(dir, script string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := n.command(ctx, dir, script).CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("not done within %v: %w", timeout, err)
	}
	return string(out), err
}

// mustRun is run, failing the test on an error.
func (n *netns) mustRun(t *testing.T, dir, script string, timeout time.Duration) string {
	t.Helper()
	out, err := n.run(dir, script, timeout)
	if err != nil {
		t.Fatalf("%s\n%v\n%s", script, err, out)
	}
	return out
}

// daemon is a long-running process started in a namespace.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string // path of its combined output
	done chan struct{}
	err  error
}

// start runs script in the background (bash execs its last command, so
// the process is the command itself); it is stopped with SIGTERM when
// the test ends.
func (n *netns) start(t *testing.T, name, dir, script string) *daemon {
	t.Helper()
	d := &daemon{name: name, log: filepath.Join(n.dir, name+".log"), done: make(chan struct{})}
	f, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = n.command(context.Background(), dir, script)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	if err := d.cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	go func() {
		d.err = d.cmd.Wait()
		f.Close()
		close(d.done)
	}()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop ends the process with SIGTERM (SIGKILL after 30 s) unless it has
// ended.
func (d *daemon) stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Logf("%s did not stop within 30 s of SIGTERM: killed", d.name)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// wait waits for the process to end by itself and fails the test unless
// it exits 0, showing the last lines of the clues' output too.
// A clue that ends first fails the test at once: what d waits for will
// not come.
func (d *daemon) wait(t *testing.T, timeout time.Duration, clues ...*daemon) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !d.exited() {
		select {
		case <-d.done:
		case <-deadline:
			t.Fatalf("%s did not end within %v:\n%s%s", d.name, timeout, d.tail(20), tails(clues))
		case <-tick.C:
			for _, c := range clues {
				if c.exited() {
					t.Fatalf("%s ended (%v) while %s waited for it:\n%s%s", c.name, c.err, d.name, d.tail(20), tails(clues))
				}
			}
		}
	}
	if d.err != nil {
		t.Fatalf("%s: %v:\n%s%s", d.name, d.err, d.tail(20), tails(clues))
	}
}

// tails is the last lines of each process's output.
func tails(ds []*daemon) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "\n--- %s:\n%s", d.name, d.tail(30))
	}
	return b.String()
}

// exited reports whether the process has ended.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// tail returns the last n lines of the process's output.
func (d *daemon) tail(n int) string {
	b, _ := os.ReadFile(d.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls check until it returns nil, failing the test with the
// last error and clues after the deadline.
func waitFor(t *testing.T, what string, timeout time.Duration, check func() error, clues ...*daemon) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	delay := 50 * time.Millisecond
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v%s", what, timeout, err, tails(clues))
		}
		time.Sleep(delay) // polling a condition with a deadline, not synchronisation
		delay = min(2*delay, time.Second)
	}
}

// onTerminal runs script in the namespace on a terminal (natscli's
// stream view refuses to run without one), answering "n" when it asks
// whether to show the next page.
func (n *netns) onTerminal(dir, script string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := n.command(ctx, dir, script)
	return runOnTerminalAnswering(ctx, cmd, "Next Page?", "n\r")
}

// pageAnswerer watches what a terminal shows and answers a prompt. The
// answer is typed again every 300 ms once the prompt has shown, until
// the program ends: a prompt library that puts the terminal in raw mode
// after drawing the prompt flushes what was typed before that.
type pageAnswerer struct {
	mu     sync.Mutex
	seen   bytes.Buffer
	prompt []byte
	answer []byte
	tty    interface{ Write([]byte) (int, error) }
	asked  chan struct{} // closed once the prompt has shown
	once   sync.Once
}

// cursorQuery is the terminal's "where is the cursor?" (DSR), which the
// prompt library asks before it draws a prompt and waits to be
// answered: a terminal with nothing behind it must answer it too.
var cursorQuery, cursorReply = []byte("\x1b[6n"), []byte("\x1b[1;1R")

func (p *pageAnswerer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range bytes.Count(b, cursorQuery) {
		_, _ = p.tty.Write(cursorReply)
	}
	p.seen.Write(b)
	if bytes.Contains(p.seen.Bytes(), p.prompt) {
		p.seen.Reset()
		p.once.Do(func() { close(p.asked) })
	}
	return len(b), nil
}

// typeAnswers types the answer every 300 ms once the prompt has shown,
// until done is closed.
func (p *pageAnswerer) typeAnswers(done <-chan struct{}) {
	select {
	case <-p.asked:
	case <-done:
		return
	}
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		_, _ = p.tty.Write(p.answer)
		p.mu.Unlock()
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

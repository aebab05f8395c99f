//go:build linux

package systemd_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shellPath is the PATH of every command the rehearsal runs on a host:
// Debian's default for root, so that nothing depends on the PATH of the
// shell that started the test.
const shellPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// subnet is the rehearsal's network, 10.231.0.0/24: it exists only
// between the network namespaces the test makes.
const subnet = "10.231.0."

// lab is the rehearsal's hosts and the switch between them: one network
// namespace per host, all joined by veth pairs to a bridge in a
// namespace of their own, so that nothing is added to the machine's own
// network.
type lab struct {
	t      *testing.T
	ctx    context.Context // ends a minute and a half before the test's deadline, so that stop still runs
	dir    string
	prefix string // of the namespaces' names, unique to this test process
	hosts  map[string]*machine
	order  []string
}

// machine is one host: systemd booted as PID 1 by systemd-nspawn on an
// overlay of this machine's own root (a tmpfs-like upper layer in the
// test's directory takes every change), in its own network namespace.
type machine struct {
	name   string
	ip     string
	netns  string
	root   string // the overlay's mount point, the container's /
	nspawn *exec.Cmd
	pid    int // the container's PID 1, as this machine sees it
	log    *os.File
}

func newLab(t *testing.T) *lab {
	t.Helper()
	dir, err := os.MkdirTemp("", "aerie-systemd-")
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{t: t, dir: dir, prefix: fmt.Sprintf("aerie%d-", os.Getpid()), hosts: map[string]*machine{}}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if d, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(ctx, d.Add(-90*time.Second))
	}
	l.ctx = ctx
	t.Cleanup(cancel)
	t.Cleanup(l.stop)
	l.ip("netns", "add", l.prefix+"switch")
	l.ip("-n", l.prefix+"switch", "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.prefix+"switch", "link", "set", "br0", "up")
	return l
}

func (l *lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("/usr/sbin/ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// hostsFile is /etc/hosts on every host: each host under its short name
// and under the example domain the deployment files use.
func (l *lab) hostsFile(names []string) string {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for i, n := range names {
		fmt.Fprintf(&b, "%s%d\t%s.example.internal %s\n", subnet, 11+i, n, n)
	}
	return b.String()
}

// boot starts every named host and waits until systemd in each has
// finished starting up.
func (l *lab) boot(names ...string) {
	l.t.Helper()
	hosts := l.hostsFile(names)
	for i, name := range names {
		m := &machine{name: name, ip: fmt.Sprintf("%s%d", subnet, 11+i), netns: l.prefix + name}
		l.hosts[name] = m
		l.order = append(l.order, name)
		l.ip("netns", "add", m.netns)
		veth := fmt.Sprintf("v%d", i)
		l.ip("link", "add", veth, "netns", l.prefix+"switch", "type", "veth", "peer", "name", "eth0", "netns", m.netns)
		l.ip("-n", l.prefix+"switch", "link", "set", veth, "master", "br0", "up")
		l.ip("-n", m.netns, "addr", "add", m.ip+"/24", "dev", "eth0")
		l.ip("-n", m.netns, "link", "set", "eth0", "up")
		l.ip("-n", m.netns, "link", "set", "lo", "up")

		base := filepath.Join(l.dir, name)
		m.root = filepath.Join(base, "root")
		for _, d := range []string{"upper", "work", "root"} {
			if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
				l.t.Fatal(err)
			}
		}
		opts := fmt.Sprintf("lowerdir=/,upperdir=%s,workdir=%s", filepath.Join(base, "upper"), filepath.Join(base, "work"))
		if err := syscall.Mount("overlay", m.root, "overlay", 0, opts); err != nil {
			l.t.Fatalf("overlay of / for %s: %v", name, err)
		}
		// A new host: its own name, addresses and machine id, and none
		// of this machine's aerie or NATS installation.
		for path, content := range map[string]string{
			"etc/hosts":      hosts,
			"etc/hostname":   name + "\n",
			"etc/machine-id": "",
		} {
			if err := os.WriteFile(filepath.Join(m.root, path), []byte(content), 0o644); err != nil {
				l.t.Fatal(err)
			}
		}
		for _, p := range []string{"usr/local/bin/aerie", "usr/local/bin/nats-server", "usr/local/bin/nats", "etc/aerie", "etc/nats", "data"} {
			_ = os.RemoveAll(filepath.Join(m.root, p))
		}

		m.log, _ = os.Create(filepath.Join(base, "console.log"))
		// --keep-unit and --register=no: this machine runs no systemd
		// of its own to register with. The container boots to
		// basic.target, so the image's own services stay off and only
		// what the rehearsal enables runs.
		m.nspawn = exec.Command("/usr/bin/systemd-nspawn",
			"--quiet", "--directory", m.root, "--machine", name, "--boot",
			"--keep-unit", "--register=no", "--link-journal=no", "--console=passive",
			"--network-namespace-path=/run/netns/"+m.netns,
			"systemd.unit=basic.target")
		m.nspawn.Stdout, m.nspawn.Stderr = m.log, m.log
		m.nspawn.Env = []string{"PATH=" + shellPath, "SYSTEMD_NSPAWN_TMPFS_TMP=1"}
		m.nspawn.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := m.nspawn.Start(); err != nil {
			l.t.Fatalf("systemd-nspawn %s: %v", name, err)
		}
	}
	for _, name := range names {
		m := l.hosts[name]
		l.eventually(30*time.Second, name+"'s PID 1", func() bool {
			m.pid = containerInit(m.nspawn.Process.Pid)
			return m.pid != 0
		})
		// Start-up is over at "running", or "degraded" with a unit
		// failed, which the rehearsal reports but does not need.
		var state string
		l.eventually(60*time.Second, name+"'s start-up", func() bool {
			out, _ := l.on(name, "systemctl is-system-running")
			state = strings.TrimSpace(out)
			return state == "running" || state == "degraded"
		})
		if state != "running" {
			failed, _ := l.on(name, "systemctl --failed --no-legend")
			l.t.Logf("%s booted %s: %s", name, state, strings.TrimSpace(failed))
		}
	}
}

// containerInit finds the container's PID 1 below the nspawn process:
// the process whose last namespace PID is 1.
func containerInit(nspawn int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var nspids []string
		var ppid int
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspids = strings.Fields(v)
			}
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if len(nspids) == 2 && nspids[1] == "1" && descends(ppid, nspawn) {
			return pid
		}
	}
	return 0
}

func descends(pid, ancestor int) bool {
	for i := 0; i < 16 && pid > 1; i++ {
		if pid == ancestor {
			return true
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return false
		}
		_, after, _ := strings.Cut(string(status), "PPid:")
		line, _, _ := strings.Cut(after, "\n")
		pid, _ = strconv.Atoi(strings.TrimSpace(line))
	}
	return false
}

// enter is the command that runs argv on the host: in all of its
// namespaces and its root, as root, with a clean environment.
func (m *machine) enter(ctx context.Context, env []string, argv ...string) *exec.Cmd {
	args := append([]string{"-t", strconv.Itoa(m.pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--",
		"/usr/bin/env", "-i", "PATH=" + shellPath, "HOME=/root", "LANG=C.UTF-8", "USER=root", "LOGNAME=root",
		"BASH_ENV=" + standIns}, env...)
	return exec.CommandContext(ctx, "/usr/bin/nsenter", append(args, argv...)...)
}

// on runs a bash script on the host and returns what it printed.
func (l *lab) on(host, script string) (string, error) {
	m := l.hosts[host]
	if m == nil {
		return "", fmt.Errorf("no host %s", host)
	}
	var out bytes.Buffer
	ctx := l.ctx
	if l.t.Failed() || ctx.Err() != nil {
		// stop's report of a failed test still gets its half minute.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
	}
	cmd := m.enter(ctx, nil, "/bin/bash", "-c", script)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// must runs a bash script on the host, failing the test on an error.
func (l *lab) must(host, script string) string {
	l.t.Helper()
	out, err := l.on(host, script)
	if err != nil {
		l.t.Fatalf("on %s: %s: %v\n%s", host, script, err, out)
	}
	return out
}

// put writes a file on the host, creating its directory, as root.
func (l *lab) put(host, path string, content []byte, mode os.FileMode) {
	l.t.Helper()
	m := l.hosts[host]
	p := filepath.Join(fmt.Sprintf("/proc/%d/root", m.pid), path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		l.t.Fatal(err)
	}
	if err := os.WriteFile(p, content, mode); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		l.t.Fatal(err)
	}
}

// read reads a file on the host.
func (l *lab) read(host, path string) ([]byte, error) {
	m := l.hosts[host]
	return os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/root", m.pid), path))
}

// stop powers every host off (nspawn turns SIGTERM into a clean
// shutdown), kills what did not stop, by PID, and removes the overlays
// and namespaces. On failure it prints each host's failed units and
// keeps the directory.
func (l *lab) stop() {
	for _, name := range l.order {
		m := l.hosts[name]
		if l.t.Failed() && m.pid != 0 {
			out, _ := l.on(name, "systemctl --no-pager --failed; journalctl --no-pager -n 40 -o short-monotonic")
			l.t.Logf("%s:\n%s", name, out)
		}
		if m.nspawn != nil && m.nspawn.Process != nil {
			_ = m.nspawn.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, name := range l.order {
		m := l.hosts[name]
		if m.nspawn == nil || m.nspawn.Process == nil {
			continue
		}
		done := make(chan struct{})
		go func() { _ = m.nspawn.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = m.nspawn.Process.Kill()
			<-done
		}
		// An nspawn killed outright leaves its container running:
		// killing the container's PID 1 ends every process in it.
		if root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", m.pid)); m.pid != 0 && err == nil && root == m.root {
			_ = syscall.Kill(m.pid, syscall.SIGKILL)
		}
		if m.log != nil {
			m.log.Close()
		}
	}
	for _, name := range l.order {
		m := l.hosts[name]
		if err := syscall.Unmount(m.root, 0); err != nil {
			_ = syscall.Unmount(m.root, syscall.MNT_DETACH)
		}
		_ = exec.Command("/usr/sbin/ip", "netns", "del", m.netns).Run()
	}
	_ = exec.Command("/usr/sbin/ip", "netns", "del", l.prefix+"switch").Run()
	if l.t.Failed() {
		l.t.Logf("rehearsal directory kept: %s", l.dir)
		return
	}
	_ = os.RemoveAll(l.dir)
}

// eventually polls cond until it holds, failing the test after timeout
// or once the lab's own deadline has passed, whichever comes first.
func (l *lab) eventually(timeout time.Duration, what string, cond func() bool) {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	if d, ok := l.ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for !cond() {
		if time.Now().After(deadline) {
			l.t.Fatalf("gave up waiting for %s (at most %v)", what, timeout)
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

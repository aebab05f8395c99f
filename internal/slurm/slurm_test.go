//go:build linux

package slurm_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cluster is a one-machine Slurm: munged, slurmctld and slurmd, run in
// the foreground as children of the test, with their state in dir.
type cluster struct {
	t     *testing.T
	dir   string
	conf  string
	env   []string
	procs []*exec.Cmd
}

// needs skips the test unless it may run: AERIE_SLURM=1, root, and the
// daemons installed.
func needs(t *testing.T) {
	if os.Getenv("AERIE_SLURM") == "" {
		t.Skip("the Slurm test runs with AERIE_SLURM=1 (make slurm): it needs root, slurm-wlm and munge")
	}
	if os.Geteuid() != 0 {
		t.Skip("the Slurm test needs root: slurmd runs jobs as their user")
	}
	for _, p := range []string{"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/sbin/mungekey", "/usr/bin/sbatch"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is missing: install Debian's slurm-wlm and munge", p)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster writes the configuration and starts the daemons; they
// are killed, by PID, when the test ends.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "aerie-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	// The job scripts and outputs are written by root and read by the
	// daemons: a world-readable base keeps munge's checks out of it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	t.Cleanup(c.stop)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	for _, d := range []string{"munge", "state", "spool", "log", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	key, sock := filepath.Join(dir, "munge", "munge.key"), filepath.Join(dir, "munge", "munge.socket")
	c.run("/usr/sbin/mungekey", "--create", "--keyfile", key)
	c.start("munged", "/usr/sbin/munged", "--foreground", "--key-file", key, "--socket", sock,
		"--pid-file", filepath.Join(dir, "run", "munged.pid"), "--log-file", filepath.Join(dir, "log", "munged.log"),
		"--seed-file", filepath.Join(dir, "munge", "munge.seed"), "--force")
	c.conf = filepath.Join(dir, "slurm.conf")
	conf := fmt.Sprintf(`ClusterName=aerie
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[4]s
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/run/slurmctld.pid
SlurmdPidFile=%[5]s/run/slurmd.pid
SlurmctldLogFile=%[5]s/log/slurmctld.log
SlurmdLogFile=%[5]s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=30
NodeName=%[1]s NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
`, host, freePort(t), freePort(t), sock, dir)
	if err := os.WriteFile(c.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c.env = append(os.Environ(), "SLURM_CONF="+c.conf)
	c.start("slurmctld", "/usr/sbin/slurmctld", "-D", "-i", "-f", c.conf)
	c.start("slurmd", "/usr/sbin/slurmd", "-D", "-f", c.conf)
	c.eventually(60*time.Second, "the node idle in sinfo", func() bool {
		out, err := c.output("/usr/bin/sinfo", "-h", "-o", "%T")
		return err == nil && strings.TrimSpace(out) == "idle"
	})
	return c
}

func (c *cluster) start(name, prog string, args ...string) {
	c.t.Helper()
	f, err := os.Create(filepath.Join(c.dir, "log", name+".out"))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(prog, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	c.procs = append(c.procs, cmd)
}

// stop cancels every job and kills the daemons this test started, by
// PID, newest first; on failure it prints their logs' ends.
func (c *cluster) stop() {
	if c.conf != "" {
		_, _ = c.output("/usr/bin/scancel", "--full", "--user", "root")
		c.eventually(45*time.Second, "no job left", func() bool {
			out, err := c.output("/usr/bin/squeue", "-h")
			return err != nil || strings.TrimSpace(out) == ""
		})
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i].Process
		_ = p.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _, _ = c.procs[i].Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Kill()
		}
	}
	if c.t.Failed() {
		for _, name := range []string{"slurmctld.log", "slurmd.log"} {
			b, _ := os.ReadFile(filepath.Join(c.dir, "log", name))
			c.t.Logf("%s:\n%s", name, tail(string(b), 30))
		}
		c.t.Logf("work directory kept: %s", c.dir)
		return
	}
	_ = os.RemoveAll(c.dir)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *cluster) output(prog string, args ...string) (string, error) {
	cmd := exec.Command(prog, args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (c *cluster) run(prog string, args ...string) string {
	c.t.Helper()
	out, err := c.output(prog, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) eventually(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("gave up after %v waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

// sbatch submits a job script with its arguments and returns the job id.
func (c *cluster) sbatch(script string, args ...string) string {
	c.t.Helper()
	out := c.run("/usr/bin/sbatch", append([]string{"--parsable", "--chdir", c.dir, script}, args...)...)
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	return id
}

// state is a job's state in squeue ("" once it has left the queue).
func (c *cluster) state(id string) string {
	out, _ := c.output("/usr/bin/squeue", "-h", "-j", id, "-o", "%T")
	return strings.TrimSpace(out)
}

// build compiles aerie into dir.
func build(t *testing.T, dir string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "aerie")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/aerie")
	cmd.Dir = strings.TrimSpace(string(root))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// settings writes a settings file for the job scripts, from the example
// with these values.
func settings(t *testing.T, path string, vals map[string]string, engine []string) {
	t.Helper()
	var b strings.Builder
	for k, v := range vals {
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	fmt.Fprintf(&b, "AERIE_ENGINE_CMD=(%s)\n", strings.Join(engine, " "))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSlurmRun runs a 3,000-prompt run (AERIE_SLURM_PROMPTS) through
// sbatch: the head job
// (NATS server and aggregator), prompts queued from the "login node",
// two worker jobs each starting its own simulator, one worker job
// cancelled with scancel mid-run and submitted again. Every prompt must
// be written exactly once.
func TestSlurmRun(t *testing.T) {
	needs(t)
	c := startCluster(t)
	bin := build(t, c.dir)
	root, _ := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	scripts := filepath.Join(strings.TrimSpace(string(root)), "deploy", "slurm")
	n, run := 3000, "slurm"
	if v := os.Getenv("AERIE_SLURM_PROMPTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("AERIE_SLURM_PROMPTS=%q: want a count of at least 100", v)
		}
	}
	natsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	data, logs := filepath.Join(c.dir, "data"), filepath.Join(c.dir, "logs")
	base := map[string]string{
		"AERIE_BIN": bin, "AERIE_RUN": run, "AERIE_NATS_LISTEN": natsAddr, "AERIE_NATS_URL": "nats://" + natsAddr,
		"AERIE_STORE": filepath.Join(c.dir, "store"), "AERIE_DATA_DIR": data, "AERIE_LOG_DIR": logs,
		"AERIE_ENGINE": "auto", "AERIE_ENGINE_WAIT": "2m", "AERIE_WINDOW": "auto", "AERIE_GRACE": "5s", "AERIE_HEAD_LINGER": "20s",
	}
	head := filepath.Join(c.dir, "head.env")
	settings(t, head, base, []string{"/bin/false"})
	workerEnv := func(i int) string {
		port := freePort(t)
		vals := map[string]string{}
		for k, v := range base {
			vals[k] = v
		}
		vals["AERIE_ENGINE_PORT"] = strconv.Itoa(port)
		path := filepath.Join(c.dir, fmt.Sprintf("worker-%d.env", i))
		// SGLang's dialect, so that the jobs also show --engine auto
		// telling it; 100 times real time.
		settings(t, path, vals, []string{bin, "sim", "--engine", "sglang", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--speed", "10", "--output-median", "300", "--seed", strconv.Itoa(i)})
		return path
	}

	start := time.Now()
	headJob := c.sbatch(filepath.Join(scripts, "aerie-head.sbatch"), head)
	c.eventually(60*time.Second, "the NATS server of the head job", func() bool {
		conn, err := net.DialTimeout("tcp", natsAddr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	prompts := filepath.Join(c.dir, "prompts.jsonl")
	c.run(bin, "gen-prompts", "--count", strconv.Itoa(n), "--out", prompts)
	c.run(bin, "produce", "--nats", "nats://"+natsAddr, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5", "--max-tokens", "2000")

	w1 := c.sbatch(filepath.Join(scripts, "aerie-work.sbatch"), workerEnv(1))
	w2 := c.sbatch(filepath.Join(scripts, "aerie-work.sbatch"), workerEnv(2))
	out := filepath.Join(data, run, "completions.jsonl")
	c.eventually(3*time.Minute, "a tenth of the prompts written", func() bool { return lines(out) >= n/10 })
	c.run("/usr/bin/scancel", w1)
	cancelledAt := lines(out)
	c.eventually(60*time.Second, "the cancelled worker job gone", func() bool { return c.state(w1) == "" })
	w3 := c.sbatch(filepath.Join(scripts, "aerie-work.sbatch"), workerEnv(3))
	c.eventually(8*time.Minute, "the head job ended: the run done", func() bool { return c.state(headJob) == "" })
	wall := time.Since(start)
	for _, w := range []string{w2, w3} {
		c.eventually(2*time.Minute, "worker job "+w+" ended", func() bool { return c.state(w) == "" })
	}

	ids := map[string]int{}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	workers := map[string]int{}
	for sc.Scan() {
		var l struct{ ID, Worker string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("bad line: %v", err)
		}
		ids[l.ID]++
		workers[l.Worker]++
	}
	twice := 0
	for _, k := range ids {
		twice += k - 1
	}
	t.Logf("%d prompts through sbatch in %s: %d written, %d twice; worker job %s cancelled at %d written; by worker %v",
		n, wall.Round(time.Second), len(ids), twice, w1, cancelledAt, workers)
	if len(ids) != n || twice != 0 {
		t.Fatalf("%d distinct prompts written, %d twice; want %d once each", len(ids), twice, n)
	}
	if failed, err := os.ReadFile(filepath.Join(data, run, "failed.jsonl")); err == nil && len(failed) > 0 {
		t.Fatalf("failed prompts:\n%s", tail(string(failed), 5))
	}
}

// lines counts the lines of a file (0 while it does not exist).
func lines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

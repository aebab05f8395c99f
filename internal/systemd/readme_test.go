//go:build linux

package systemd_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// standIns is the file every host's bash reads first (BASH_ENV): the
// rehearsal's stand-ins for what a host of the README has and these do
// not. Every command already runs as root, so sudo only runs it;
// sudoedit writes, in place (keeping owner and mode), the file the test
// prepared under /root/.edits for that path: what an operator would
// type into the editor.
const standIns = "/root/.rehearsal"

const standInsScript = `sudo() { if [ "$1" = -u ]; then local u=$2; shift 2; runuser -u "$u" -- "$@"; else "$@"; fi; }
sudoedit() { local f; for f; do cat "/root/.edits$f" > "$f"; done; }
`

// sshScript and scpScript are the workstation's ssh and scp: a command
// run by bash, as root, on the rehearsal host of that name, and files
// copied onto it. REHEARSAL_HOSTS is a directory with one file per host
// holding its PID 1.
const sshScript = `#!/bin/bash
set -u
host=$1; shift
pid=$(cat "$REHEARSAL_HOSTS/$host" 2>/dev/null) || { echo "ssh: Could not resolve hostname $host" >&2; exit 255; }
exec /usr/bin/nsenter -t "$pid" -m -u -i -n -p -r -w -- /usr/bin/env -i PATH=` + shellPath + ` HOME=/root LANG=C.UTF-8 BASH_ENV=` + standIns + ` /bin/bash -c "cd /root && $*"
`

const scpScript = `#!/bin/bash
set -eu
dst=${@: -1}; host=${dst%%:*}; path=${dst#*:}
pid=$(cat "$REHEARSAL_HOSTS/$host" 2>/dev/null) || { echo "ssh: Could not resolve hostname $host" >&2; exit 255; }
for src in "${@:1:$#-1}"; do
  target=/proc/$pid/root$path
  if [ -d "$target" ]; then target=$target/$(basename "$src"); fi
  cp "$src" "$target"
done
`

// section is one "## " part of deploy/README.md: its prose and its
// command blocks (lines indented by four spaces), in order.
type section struct {
	title  string
	prose  string
	blocks []string
}

func readReadme(t *testing.T, path string) []section {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []section
	var cur *section
	var block []string
	flush := func() {
		if cur != nil && len(block) > 0 {
			cur.blocks = append(cur.blocks, strings.Join(block, "\n")+"\n")
		}
		block = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if title, ok := strings.CutPrefix(line, "## "); ok {
			flush()
			out = append(out, section{title: title})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue
		}
		if code, ok := strings.CutPrefix(line, "    "); ok && (len(block) > 0 || strings.TrimSpace(code) != "") {
			block = append(block, code)
			continue
		}
		if strings.TrimSpace(line) == "" && len(block) > 0 {
			continue // a blank line inside a block
		}
		flush()
		cur.prose += line + "\n"
	}
	flush()
	return out
}

// find returns the section whose title starts with prefix, with at
// least n blocks.
func find(t *testing.T, doc []section, prefix string, n int) section {
	t.Helper()
	for _, s := range doc {
		if strings.HasPrefix(s.title, prefix) {
			if len(s.blocks) < n {
				t.Fatalf("deploy/README.md %q has %d command blocks; the rehearsal runs %d", s.title, len(s.blocks), n)
			}
			return s
		}
	}
	t.Fatalf("deploy/README.md has no section %q", prefix)
	return section{}
}

// blockWith is the section's one command block that holds text.
func blockWith(t *testing.T, s section, text string) string {
	t.Helper()
	var found []string
	for _, b := range s.blocks {
		if strings.Contains(b, text) {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("deploy/README.md %q has %d command blocks with %q; the rehearsal runs one", s.title, len(found), text)
	}
	return found[0]
}

// says fails unless the section's prose holds the command the rehearsal
// runs, so that the two cannot drift apart.
func says(t *testing.T, s section, command string) string {
	t.Helper()
	if !strings.Contains(strings.Join(strings.Fields(s.prose), " "), command) {
		t.Fatalf("deploy/README.md %q no longer says `%s`", s.title, command)
	}
	return command
}

// edit replaces each old text with its new one, failing when the file
// no longer holds it: the README's instruction to edit it would then be
// wrong too.
func edit(t *testing.T, content []byte, pairs ...string) []byte {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !bytes.Contains(content, []byte(pairs[i])) {
			t.Fatalf("the file to edit no longer holds %q", pairs[i])
		}
		content = bytes.Replace(content, []byte(pairs[i]), []byte(pairs[i+1]), 1)
	}
	return content
}

// workstation runs a block on the machine the operator works from: this
// test's own, in dir, with ssh and scp reaching the rehearsal's hosts
// and aerie on the PATH.
func workstation(t *testing.T, l *lab, tools, dir, script string) string {
	t.Helper()
	hosts := filepath.Join(tools, "hosts")
	_ = os.MkdirAll(hosts, 0o755)
	for name, m := range l.hosts {
		if err := os.WriteFile(filepath.Join(hosts, name), []byte(strconv.Itoa(m.pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(l.ctx, "/bin/bash", "-c", "set -euo pipefail\n"+script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(tools, "bin")+":"+shellPath+":"+os.Getenv("PATH"), "REHEARSAL_HOSTS="+hosts)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("on the workstation, in %s:\n%s\n%v\n%s", dir, script, err, out)
	}
	return string(out)
}

// onHost runs a block on a host, in /root/aerie-deploy, where the
// rehearsal put the deployment files that host needs.
func onHost(t *testing.T, l *lab, host, script string) string {
	t.Helper()
	return l.must(host, "set -euo pipefail\ncd /root/aerie-deploy\n"+script)
}

// perHost splits a block whose commands end in "# data host" or "# each
// GPU host" into the commands for each kind of host; a command may go on
// over lines that end in a backslash.
func perHost(block string) map[string][]string {
	out := map[string][]string{}
	joined := strings.ReplaceAll(strings.TrimSpace(block), "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		i := strings.LastIndex(line, "# ")
		if i < 0 {
			continue
		}
		where := strings.TrimSpace(line[i+2:])
		out[where] = append(out[where], strings.TrimSpace(line[:i]))
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(root))
}

// TestDeployReadme rehearses deploy/README.md, the systemd way, on six
// hosts booted with systemd: nats-1, nats-2 and nats-3, gpu-1 and gpu-2
// (each with aerie's simulator in vLLM's place, on 127.0.0.1:8000 with an
// API key) and data. It runs the README's command blocks as written, on
// the hosts they name, with these stand-ins: sudo and sudoedit (see
// standIns), ssh and scp (see sshScript), the deployment files and the
// seeds each host needs copied to its /root/aerie-deploy, and the hosts'
// names resolved by /etc/hosts. A run of AERIE_SYSTEMD_PROMPTS prompts
// (default 1,000) must then be written once each, through a restart of
// one worker, by the units.
func TestDeployReadme(t *testing.T) {
	needs(t)
	n := 1000
	if v := os.Getenv("AERIE_SYSTEMD_PROMPTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("AERIE_SYSTEMD_PROMPTS=%q: want a count of at least 100", v)
		}
	}
	root := repoRoot(t)
	deploy := filepath.Join(root, "deploy")
	doc := readReadme(t, filepath.Join(deploy, "README.md"))
	natsServer, natsCLI := toolPath(t, root, "nats-server"), toolPath(t, root, "nats")

	start := time.Now()
	l := newLab(t)
	natsHosts, gpuHosts := []string{"nats-1", "nats-2", "nats-3"}, []string{"gpu-1", "gpu-2"}
	aerieHosts := append(append([]string{}, gpuHosts...), "data")
	l.boot(append(append([]string{}, natsHosts...), aerieHosts...)...)
	t.Logf("six hosts booted in %s", time.Since(start).Round(time.Second))
	for name := range l.hosts {
		l.put(name, standIns, []byte(standInsScript), 0o644)
		l.must(name, "install -d -m 0700 /root/aerie-deploy")
	}
	tools := filepath.Join(l.dir, "workstation")
	for name, script := range map[string]string{"ssh": sshScript, "scp": scpScript} {
		if err := os.MkdirAll(filepath.Join(tools, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tools, "bin", name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{filepath.Join(tools, "trusted"), filepath.Join(tools, "bin")} {
		_ = os.MkdirAll(d, 0o700)
	}

	// 1. Binaries: built here, copied to every aerie host as the README
	// shows for gpu-1; nats-server and the nats CLI installed as its
	// prose says.
	s1 := find(t, doc, "1.", 1)
	for _, h := range aerieHosts {
		workstation(t, l, tools, root, strings.ReplaceAll(s1.blocks[0], "gpu-1", h))
		out := onHost(t, l, h, says(t, s1, "/usr/local/bin/aerie version"))
		if !strings.Contains(out, "aerie") {
			t.Fatalf("aerie version on %s: %q", h, out)
		}
	}
	if err := os.Symlink(filepath.Join(root, "bin", "aerie"), filepath.Join(tools, "bin", "aerie")); err != nil {
		t.Fatal(err)
	}
	natsBin, _ := os.ReadFile(natsServer)
	for _, h := range natsHosts {
		l.put(h, "/usr/local/bin/nats-server", natsBin, 0o755)
	}
	cliBin, _ := os.ReadFile(natsCLI)
	l.put("data", "/usr/local/bin/nats", cliBin, 0o755)

	// 2. Credentials, on the trusted machine.
	trusted := filepath.Join(tools, "trusted")
	s2 := find(t, doc, "2.", 1)
	workstation(t, l, tools, trusted, s2.blocks[0])
	auth := filepath.Join(trusted, "aerie-auth")
	authFile := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(auth, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// 3. The NATS cluster: each node's files, its edit of
	// nats-server.conf, then the README's block on it.
	s3 := find(t, doc, "3.", 1)
	conf, err := os.ReadFile(filepath.Join(deploy, "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	unit, _ := os.ReadFile(filepath.Join(deploy, "nats-server.service"))
	for _, h := range natsHosts {
		l.put(h, "/root/aerie-deploy/nats-server.conf", conf, 0o644)
		l.put(h, "/root/aerie-deploy/nats-server.service", unit, 0o644)
		for _, f := range []string{"users.conf", "routes.conf", "route.secret"} {
			l.put(h, "/root/aerie-deploy/aerie-auth/"+f, authFile(f), 0o600)
		}
		l.put(h, "/root/.edits/etc/nats/nats-server.conf", edit(t, conf,
			"server_name: nats-1", "server_name: "+h,
			"# include ./aerie/users.conf", "include ./aerie/users.conf",
			"# include ./aerie/routes.conf", "include ./aerie/routes.conf"), 0o600)
		onHost(t, l, h, s3.blocks[0])
	}
	healthz := says(t, s3, "curl -fsS http://127.0.0.1:8222/healthz")
	for _, h := range natsHosts {
		l.eventually(60*time.Second, h+"'s /healthz ok", func() bool {
			out, err := l.on(h, healthz)
			return err == nil && strings.Contains(out, `"status":"ok"`)
		})
		if out := l.must(h, "stat -c '%U %a' /var/lib/nats /etc/nats/aerie/route.secret"); out != "nats 750\nnats 600\n" {
			t.Errorf("%s: owner and mode of the store and the route secret: %q", h, out)
		}
	}

	// 5. The aerie hosts (before 4 and 6, which need them installed).
	s5 := find(t, doc, "5.", 4)
	env, _ := os.ReadFile(filepath.Join(deploy, "aerie.env.example"))
	apiKey := "sk-rehearsal-" + strconv.Itoa(os.Getpid())
	for _, h := range aerieHosts {
		for _, f := range []string{"aerie.env.example", "aerie-work@.service", "aerie-aggregate@.service"} {
			b, _ := os.ReadFile(filepath.Join(deploy, f))
			l.put(h, "/root/aerie-deploy/"+f, b, 0o644)
		}
		// The example's NATS URLs already name the rehearsal's hosts.
		l.put(h, "/root/.edits/etc/aerie/aerie.env", env, 0o600)
		l.put(h, "/root/.edits/etc/aerie/api-key", []byte(apiKey+"\n"), 0o600)
		onHost(t, l, h, blockWith(t, s5, "useradd"))
	}
	seeds := blockWith(t, s5, "scp aerie-auth/worker.nk gpu-1:")
	for _, h := range gpuHosts {
		workstation(t, l, tools, trusted, strings.ReplaceAll(seeds, "gpu-1", h))
		onHost(t, l, h, blockWith(t, s5, "/etc/aerie/api-key"))
	}
	workstation(t, l, tools, trusted, strings.ReplaceAll(strings.ReplaceAll(seeds, "gpu-1", "data"), "worker.nk", "aggregator.nk"))
	onHost(t, l, "data", blockWith(t, s5, "install -d -o aerie -g aerie /data"))
	for _, h := range gpuHosts {
		if out := l.must(h, "stat -c '%U %G %a' /etc/aerie/worker.nk /etc/aerie/api-key"); out != "aerie aerie 600\nroot aerie 640\n" {
			t.Errorf("%s: owner and mode of the seed and the key: %q", h, out)
		}
	}
	if out := l.must("data", "stat -c '%U %G %a' /etc/aerie/aggregator.nk /data"); out != "aerie aerie 600\naerie aerie 755\n" {
		t.Errorf("data: owner and mode of the seed and /data: %q", out)
	}

	// vLLM's place on each GPU host: the simulator, serving the run's
	// model on 127.0.0.1:8000 with the key.
	for i, h := range gpuHosts {
		l.must(h, fmt.Sprintf("systemd-run --quiet --unit=vllm --collect /usr/local/bin/aerie sim --listen 127.0.0.1:8000 "+
			"--model moonshotai/Kimi-K2.5 --api-key %s --speed 20 --output-median 300 --seed %d", apiKey, i+1))
	}

	// 6. A run, produced from the data host with the producer's and the
	// admin's seeds and the prompts file.
	s6 := find(t, doc, "6.", 4)
	prompts := filepath.Join(tools, "prompts.jsonl")
	if out, err := exec.Command(filepath.Join(root, "bin", "aerie"), "gen-prompts", "--count", strconv.Itoa(n), "--out", prompts).CombinedOutput(); err != nil {
		t.Fatalf("gen-prompts: %v\n%s", err, out)
	}
	pb, _ := os.ReadFile(prompts)
	l.put("data", "/root/aerie-deploy/prompts.jsonl", pb, 0o644)
	for _, f := range []string{"producer.nk", "admin.nk"} {
		l.put("data", "/root/aerie-deploy/aerie-auth/"+f, authFile(f), 0o600)
	}
	session := blockWith(t, s6, "aerie produce")
	out := onHost(t, l, "data", session)
	t.Logf("doctor and produce:\n%s", lastLines(out, 12))

	// 3's check of the cluster and 4's of the replicas, with 6's
	// environment for the nats CLI.
	inspect := func(cmd string) string {
		setup, _, _ := strings.Cut(session, "/usr/local/bin/aerie doctor")
		return onHost(t, l, "data", setup+cmd)
	}
	streams := inspect(strings.TrimPrefix(says(t, s3, "nats -s nats://nats-1.example.internal:4222 --nkey aerie-auth/admin.nk stream ls"), ""))
	if !strings.Contains(streams, "AERIE_PROMPTS") {
		t.Errorf("stream ls with the admin key:\n%s", streams)
	}
	if out, err := l.on("data", "cd /root/aerie-deploy && nats -s nats://nats-1.example.internal:4222 stream ls"); err == nil {
		t.Errorf("stream ls without a key worked:\n%s", out)
	}
	s4 := find(t, doc, "4.", 1)
	report := inspect(s4.blocks[0])
	checkReplicas(t, report)

	// Each host checked as its unit will run.
	checks := perHost(blockWith(t, s6, "--nkey /etc/aerie/worker.nk"))
	if len(checks["data host"]) != 1 || len(checks["each GPU host"]) != 1 {
		t.Fatalf("deploy/README.md %q: want one doctor for the data host and one for each GPU host, have %v", s6.title, checks)
	}
	for _, h := range gpuHosts {
		out := onHost(t, l, h, checks["each GPU host"][0])
		t.Logf("doctor on %s:\n%s", h, lastLines(out, 6))
	}
	out = onHost(t, l, "data", checks["data host"][0])
	t.Logf("doctor on data:\n%s", lastLines(out, 6))

	// The units: the aggregator on the data host, a worker on each GPU
	// host, one of them restarted mid-run.
	units := perHost(blockWith(t, s6, "enable --now"))
	if len(units["data host"]) != 1 || len(units["each GPU host"]) != 1 {
		t.Fatalf("deploy/README.md %q: want one line for the data host and one for each GPU host, have %v", s6.title, units)
	}
	runStart := time.Now()
	onHost(t, l, "data", units["data host"][0])
	for _, h := range gpuHosts {
		onHost(t, l, h, units["each GPU host"][0])
	}
	run := regexp.MustCompile(`--run (\S+)`).FindStringSubmatch(session)[1]
	output := "/data/" + run + "/completions.jsonl"
	written := func() int {
		b, _ := l.read("data", output)
		return bytes.Count(b, []byte("\n"))
	}
	l.eventually(3*time.Minute, "a third of the prompts written", func() bool { return written() >= n/3 })
	restartedAt := written()
	s7 := find(t, doc, "Restarts", 0)
	onHost(t, l, "gpu-1", strings.ReplaceAll(says(t, s7, "systemctl restart aerie-work@RUN"), "RUN", run))

	// Prometheus's view: each worker's metrics from another host (the
	// restarted one's once it is back).
	for _, h := range gpuHosts {
		l.eventually(30*time.Second, h+":9464/metrics from the data host", func() bool {
			m, err := l.on("data", "curl -fsS http://"+h+".example.internal:9464/metrics")
			return err == nil && strings.Contains(m, "aerie_worker_")
		})
	}
	l.eventually(8*time.Minute, "the aggregator's unit done", func() bool {
		out, _ := l.on("data", "systemctl is-active aerie-aggregate@"+run)
		return strings.TrimSpace(out) == "inactive"
	})
	wall := time.Since(runStart)
	if out := l.must("data", "systemctl show -p Result -p ExecMainStatus aerie-aggregate@"+run); out != "Result=success\nExecMainStatus=0\n" {
		t.Errorf("the aggregator's unit ended with %q", out)
	}
	journal := l.must("data", "journalctl --no-pager -u aerie-aggregate@"+run)
	if !strings.Contains(journal, "eta") && !strings.Contains(journal, "ETA") {
		t.Errorf("the aggregator's journal has no progress line:\n%s", lastLines(journal, 10))
	}

	// Workers do not exit by themselves: the README's last command.
	stop := blockWith(t, s6, "disable --now")
	for _, h := range gpuHosts {
		said := onHost(t, l, h, stop)
		if out := l.must(h, "systemctl show -p ActiveState -p Result aerie-work@"+run); out != "Result=success\nActiveState=inactive\n" {
			j, _ := l.on(h, "systemctl status --no-pager aerie-work@"+run+"; journalctl --no-pager -n 15 -u aerie-work@"+run)
			t.Errorf("%s: the worker's unit after %s: %q\n%s\n%s", h, stop, out, said, j)
		}
	}

	b, err := l.read("data", output)
	if err != nil {
		t.Fatal(err)
	}
	ids, workers, twice := map[string]int{}, map[string]int{}, 0
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var c struct{ ID, Worker string }
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("bad line in %s: %v", output, err)
		}
		if ids[c.ID]++; ids[c.ID] > 1 {
			twice++
		}
		workers[c.Worker]++
	}
	mode := l.must("data", "stat -c '%U %a' "+output)
	t.Logf("%d prompts through the units in %s (hosts booted and installed in %s): %d written, %d twice; gpu-1 restarted at %d written; by worker %v; %s is %s",
		n, wall.Round(time.Second), runStart.Sub(start).Round(time.Second), len(ids), twice, restartedAt, workers, output, strings.TrimSpace(mode))
	if len(ids) != n || twice != 0 {
		t.Fatalf("%d distinct prompts written, %d twice; want %d once each", len(ids), twice, n)
	}
	if f, err := l.read("data", "/data/"+run+"/failed.jsonl"); err == nil && len(f) > 0 {
		t.Fatalf("failed prompts:\n%s", lastLines(string(f), 5))
	}
	if strings.TrimSpace(mode) != "aerie 600" {
		t.Errorf("%s: owner and mode %q, want aerie 600 (UMask=0077)", output, mode)
	}
}

// checkReplicas fails unless every aerie stream and bucket in `nats
// stream report` lists all three nodes.
func checkReplicas(t *testing.T, report string) {
	t.Helper()
	rows := 0
	for _, line := range strings.Split(report, "\n") {
		if !strings.Contains(line, "AERIE_") && !strings.Contains(line, "KV_aerie") {
			continue
		}
		rows++
		for _, node := range []string{"nats-1", "nats-2", "nats-3"} {
			if !strings.Contains(line, node) {
				t.Errorf("stream report row without %s: %s", node, line)
			}
		}
	}
	if rows == 0 {
		t.Fatalf("nats stream report lists no aerie stream:\n%s", report)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// toolPath is a program the Makefile's systemd target installs in
// bin/tools.
func toolPath(t *testing.T, root, name string) string {
	t.Helper()
	p := filepath.Join(root, "bin", "tools", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is missing: make systemd installs it", p)
	}
	return p
}

// needs skips the test unless it may run: AERIE_SYSTEMD=1, root, and
// systemd-nspawn.
func needs(t *testing.T) {
	if os.Getenv("AERIE_SYSTEMD") == "" {
		t.Skip("the systemd rehearsal runs with AERIE_SYSTEMD=1 (make systemd): it needs root and systemd-nspawn")
	}
	if os.Geteuid() != 0 {
		t.Skip("the systemd rehearsal needs root: it boots hosts with systemd-nspawn")
	}
	for _, p := range []string{"/usr/bin/systemd-nspawn", "/usr/bin/nsenter", "/usr/sbin/ip", "/usr/bin/curl"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is missing: install Debian's systemd-container, util-linux, iproute2 and curl", p)
		}
	}
}

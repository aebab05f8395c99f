package check

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The chart's client Service for release nats in namespace nats, and
// the port nats-server listens on for clients in the chart's pods.
const (
	natsService     = "nats.nats.svc.cluster.local"
	natsClientPort  = 4222
	natsChartConfig = "/etc/nats-config" // where the chart's nats.conf is
)

// TestKubernetesRehearsal runs the standalone overlay's worker and
// aggregator containers as the cluster would: their args with $(VAR)
// expanded from their environment (aerie-config and env), each role
// Secret mounted where the pod mounts it, against a nats-server
// admitting the roles of the users.conf the NATS values include, with
// aerie sim as the backend aerie-config names. The run is queued first
// with the producer seed, as README.md says. It must complete, with no
// permission violation.
func TestKubernetesRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the standalone overlay's pods")
	}
	objs, authDir := renderAt(t, "overlays/standalone")
	imageEnv, entrypoint := imageConfig(t)
	aerieBinary(t)

	// NATS: the values' include of users.conf, resolved where the chart's
	// nats.conf is, from the ConfigMap mounted where the values mount it.
	conf := natsConfFromValues(t, objs)
	srv, natsLog, _, _, err := startNATS(t, conf, func(string) string { return t.TempDir() })
	if err != nil {
		t.Fatal(err)
	}
	var h hosts
	h.set(natsService, natsClientPort, srv.Addr().String())
	beats, err := watchHeartbeats(t, "nats://"+srv.Addr().String(), filepath.Join(authDir, "admin.nk"))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), rehearsalTimeout)
	defer cancel()
	none := newContainer(t, nil)

	// The backend aerie-config names, served by aerie sim.
	cfg := byName(t, objs, "ConfigMap", "aerie", "aerie-config", true)
	backend, err := url.Parse(str(cfg.m, "data", "AERIE_BACKEND"))
	if err != nil || backend.Port() == "" {
		t.Fatalf("aerie-config: AERIE_BACKEND %q: want http://host:port", str(cfg.m, "data", "AERIE_BACKEND"))
	}
	sim := runAerie(t, ctx, "vllm", none, []string{"sim", "--listen", "0.0.0.0:" + backend.Port(), "--speed", "20000"}, nil, &h)
	select {
	case addr := <-sim.listen:
		port, _ := strconv.Atoi(backend.Port())
		h.set(backend.Hostname(), port, addr)
	case <-sim.done:
		t.Fatalf("aerie sim: %v\n%s", sim.err, sim.out.String())
	}

	// The run, queued from the operator's machine with README.md's
	// command.
	promptsFile := filepath.Join(t.TempDir(), "prompts.jsonl")
	if pr := runAerie(t, ctx, "gen-prompts", none, []string{"gen-prompts", "--count", strconv.Itoa(rehearsalPrompts), "--out", promptsFile}, nil, &h); !exitedOK(ctx, pr) {
		t.Fatalf("aerie gen-prompts: %v\n%s", pr.err, pr.out.String())
	}
	produce := readmeProduce(t, map[string]string{
		"--nats":     "nats://" + srv.Addr().String(), // the port-forward
		"--nkey":     filepath.Join(authDir, "producer.nk"),
		"--prompts":  promptsFile,
		"--replicas": "1", // one node here, three in the chart
	})
	if pr := runAerie(t, ctx, "produce", none, produce, nil, &h); !exitedOK(ctx, pr) {
		t.Fatalf("aerie %s: %v\n%s", strings.Join(produce, " "), pr.err, pr.out.String())
	}

	// The pods.
	var procs []*proc
	var dataDir string
	for _, w := range []struct{ kind, name string }{{"Deployment", "aerie-worker"}, {"StatefulSet", "aerie-aggregator"}} {
		o := byName(t, objs, w.kind, "aerie", w.name, false)
		pod := get(o.m, "spec", "template", "spec")
		c := get(pod, "containers", 0)
		env := podEnv(t, objs, w.name, imageEnv, c)
		mounts := podMounts(t, objs, w.name, o, pod, c)
		args := podCommand(t, w.name, entrypoint, c, env)
		ct := newContainer(t, mounts)
		if w.kind == "StatefulSet" {
			dataDir = ct.path(flagValue(args, "--data-dir"))
		}
		procs = append(procs, runAerie(t, ctx, w.name, ct, args, env, &h))
	}

	run := str(cfg.m, "data", "AERIE_RUN")
	out := filepath.Join(dataDir, run, "completions.jsonl")
	done := false
	for !done && ctx.Err() == nil {
		for _, p := range procs {
			select {
			case <-p.done:
				t.Fatalf("%s exited while the run was not complete: %v\n%s", p.name, p.err, lastLines(p.out.String(), 5))
			default:
			}
		}
		if b, err := os.ReadFile(out); err == nil && strings.Count(string(b), "\n") >= rehearsalPrompts {
			done = true
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	for _, p := range append(procs, sim) {
		<-p.done
		if testing.Verbose() || !done {
			t.Logf("%s:\n%s", p.name, p.out.String())
		}
		// A pod being stopped (SIGTERM) ends cleanly.
		if p.cmd.ProcessState == nil || p.cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("%s: stopped with %v, want exit status 0", p.name, p.err)
		}
	}
	checkViolations(t, natsLog)
	if !done {
		t.Fatalf("%s: not %d lines within %v", out, rehearsalPrompts, rehearsalTimeout)
	}
	lines, workers := completions(t, out)
	if lines != rehearsalPrompts {
		t.Errorf("completions.jsonl: %d lines, want one per prompt (%d)", lines, rehearsalPrompts)
	}
	for w := range workers {
		if len(beats.names()) != 1 || beats.names()[0] != w {
			t.Errorf("completions.jsonl: answers by %s, heartbeats from %v: want the one worker pod's", w, beats.names())
		}
	}
}

func exitedOK(ctx context.Context, p *proc) bool {
	ok, _ := p.exited(ctx)
	return ok
}

// byName is the rendered object of kind in namespace ns called name
// (hashed: name or name-<hash>).
func byName(t *testing.T, objs []object, kind, ns, name string, hashed bool) object {
	t.Helper()
	for _, o := range objs {
		if o.kind == kind && o.namespace == ns && (o.name == name || hashed && strings.HasPrefix(o.name, name+"-")) {
			return o
		}
	}
	t.Fatalf("no %s %s/%s among the rendered objects", kind, ns, name)
	return object{}
}

// natsConfFromValues writes a nats.conf for the in-process server:
// JetStream, and the values' top-level include of users.conf, in
// natsChartConfig, with the ConfigMap the values mount written where they
// mount it. The rest of the chart's nats.conf (cluster, routes, ports)
// is the chart's and is not rehearsed.
func natsConfFromValues(t *testing.T, objs []object) string {
	t.Helper()
	file := filepath.Join(kubeDir, "nats-values.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var include string
	for k, val := range get(v, "config", "merge").(map[string]any) {
		if strings.HasSuffix(k, "$include") {
			include, _ = val.(string)
		}
	}
	if include == "" {
		t.Fatalf("%s: no include in config.merge", file)
	}
	// The volume mounted at the include's directory, and its ConfigMap.
	dir := filepath.ToSlash(filepath.Join(natsChartConfig, filepath.Dir(include)))
	var volume string
	for _, op := range list(v, "container", "patch") {
		if str(op, "value", "mountPath") == dir {
			volume = str(op, "value", "name")
		}
	}
	var configMap string
	for _, op := range list(v, "podTemplate", "patch") {
		if str(op, "value", "name") == volume && volume != "" {
			configMap = str(op, "value", "configMap", "name")
		}
	}
	if configMap == "" {
		t.Fatalf("%s: includes %s, but no ConfigMap is mounted at %s", file, include, dir)
	}
	cm := byName(t, objs, "ConfigMap", "nats", configMap, false)
	root := t.TempDir()
	users := filepath.Join(root, filepath.FromSlash(natsChartConfig), filepath.FromSlash(include))
	if err := os.MkdirAll(filepath.Dir(users), 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := get(cm.m, "data").(map[string]any)
	for k, val := range data {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(dir), k), []byte(val.(string)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(root, filepath.FromSlash(natsChartConfig), "nats.conf")
	if err := os.MkdirAll(filepath.Dir(conf), 0o700); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("port: %d\njetstream {}\nmax_payload: 8MB\ninclude %s\n", natsClientPort, include)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}

// podEnv is a container's environment as the kubelet makes it: the
// image's ENV, then envFrom, then env (value or valueFrom).
func podEnv(t *testing.T, objs []object, where string, imageEnv map[string]string, c any) map[string]string {
	t.Helper()
	env := map[string]string{}
	for k, v := range imageEnv {
		env[k] = v
	}
	for _, from := range list(c, "envFrom") {
		switch {
		case get(from, "configMapRef") != nil:
			cm := byName(t, objs, "ConfigMap", "aerie", str(from, "configMapRef", "name"), false)
			for k, v := range get(cm.m, "data").(map[string]any) {
				env[str(from, "prefix")+k] = v.(string)
			}
		default:
			t.Fatalf("%s: envFrom %v is not rehearsed", where, from)
		}
	}
	for _, e := range list(c, "env") {
		name := str(e, "name")
		switch {
		case get(e, "valueFrom", "configMapKeyRef") != nil:
			ref := get(e, "valueFrom", "configMapKeyRef")
			env[name] = str(byName(t, objs, "ConfigMap", "aerie", str(ref, "name"), false).m, "data", str(ref, "key"))
		case get(e, "valueFrom", "secretKeyRef") != nil:
			ref := get(e, "valueFrom", "secretKeyRef")
			env[name] = string(secretData(t, byName(t, objs, "Secret", "aerie", str(ref, "name"), false), str(ref, "key")))
		case get(e, "valueFrom") != nil:
			t.Fatalf("%s: env %s: valueFrom %v is not rehearsed", where, name, get(e, "valueFrom"))
		default:
			env[name] = expandVars(str(e, "value"), env)
		}
	}
	return env
}

func secretData(t *testing.T, s object, key string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(str(s.m, "data", key))
	if err != nil || str(s.m, "data", key) == "" {
		t.Fatalf("Secret %s: no key %s", s.name, key)
	}
	return b
}

// podMounts makes a directory for each of the container's volume mounts:
// a Secret's keys as files of its defaultMode, an emptyDir or a volume
// claim empty.
func podMounts(t *testing.T, objs []object, where string, o object, pod, c any) map[string]string {
	t.Helper()
	volumes := map[string]any{}
	for _, v := range list(pod, "volumes") {
		volumes[str(v, "name")] = v
	}
	for _, v := range list(o.m, "spec", "volumeClaimTemplates") {
		volumes[str(v, "metadata", "name")] = map[string]any{"emptyDir": map[string]any{}}
	}
	mounts := map[string]string{}
	for _, m := range list(c, "volumeMounts") {
		v, ok := volumes[str(m, "name")]
		if !ok {
			t.Fatalf("%s: volumeMount %s: no such volume", where, str(m, "name"))
		}
		dir := t.TempDir()
		switch {
		case get(v, "secret") != nil:
			s := byName(t, objs, "Secret", "aerie", str(v, "secret", "secretName"), false)
			mode := os.FileMode(0o644)
			if m, ok := get(v, "secret", "defaultMode").(float64); ok {
				mode = os.FileMode(m)
			}
			for k := range get(s.m, "data").(map[string]any) {
				if err := os.WriteFile(filepath.Join(dir, k), secretData(t, s, k), mode); err != nil {
					t.Fatal(err)
				}
			}
		case get(v, "emptyDir") != nil:
		default:
			t.Fatalf("%s: volume %v is not rehearsed", where, v)
		}
		mounts[str(m, "mountPath")] = dir
	}
	return mounts
}

// podCommand is what the container runs, without aerie's path:
// command (or the image's ENTRYPOINT) and args, with $(VAR) expanded.
func podCommand(t *testing.T, where string, entrypoint []string, c any, env map[string]string) []string {
	t.Helper()
	var cmd []string
	for _, a := range list(c, "command") {
		cmd = append(cmd, expandVars(a.(string), env))
	}
	if cmd == nil {
		cmd = entrypoint
	}
	if len(cmd) != 1 || cmd[0] != "/aerie" {
		t.Fatalf("%s: runs %v, want aerie (/aerie)", where, cmd)
	}
	var args []string
	for _, a := range list(c, "args") {
		args = append(args, expandVars(a.(string), env))
	}
	return args
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expandVars expands $(VAR) from env as Kubernetes does: $$ is a
// literal $, and a reference to an undefined variable stays as it is.
func expandVars(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// readmeProduce is the `aerie produce` command of deploy/kubernetes's
// README.md, without aerie, with the values of the flags in set replaced
// (what differs on this machine).
func readmeProduce(t *testing.T, set map[string]string) []string {
	t.Helper()
	file := filepath.Join(kubeDir, "README.md")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+aerie (produce(?:[^\n\\]|\\\n)*)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no aerie produce command", file)
	}
	args := strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
	for i := 1; i < len(args); i++ {
		if v, ok := set[args[i]]; ok && i+1 < len(args) {
			args[i+1] = v
			delete(set, args[i])
			i++
		}
	}
	for f := range set {
		t.Fatalf("%s: aerie produce without %s", file, f)
	}
	return args
}

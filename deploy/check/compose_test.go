package check

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/conf"
)

var composeDir = filepath.Join(root, "deploy", "compose")

// loadCompose loads compose.yaml as `docker compose` does, with the
// Compose Specification's schema validation, and the default
// interpolation (no variables set).
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	return loadComposeEnv(t, types.Mapping{})
}

// loadComposeEnv loads compose.yaml with env as the environment its
// variables are interpolated from.
func loadComposeEnv(t *testing.T, env types.Mapping) *types.Project {
	t.Helper()
	dir, err := filepath.Abs(composeDir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml")}},
		Environment: env,
	}, func(o *loader.Options) { o.SetProjectName("aerie", true) })
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return p
}

// roleOf is the role seed each aerie command must connect with.
var roleOf = map[string]string{"work": "worker", "aggregate": "aggregator", "produce": "producer"}

// TestCompose checks the compose demo: every service there, aerie's built
// from the repository's Dockerfile and locked down, each client with its
// own role's seed from the volume the auth service fills, all on one run,
// and started in the order the run needs.
func TestCompose(t *testing.T) {
	p := loadCompose(t)
	want := []string{"aggregator", "auth", "nats", "produce", "prompts", "sim", "worker-1", "worker-2"}
	if got := p.ServiceNames(); !slices.Equal(sorted(got), want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	repo, _ := filepath.Abs(root)
	var runs []string
	workers := 0
	for name, s := range p.Services {
		if name == "nats" {
			continue
		}
		if s.Build == nil || filepath.Clean(s.Build.Context) != repo || s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s: want build from the repository root's Dockerfile, got %+v", name, s.Build)
		}
		if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") || !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
			t.Errorf("%s: want read_only, cap_drop ALL and no-new-privileges", name)
		}
		if len(s.Command) == 0 {
			t.Errorf("%s: no command", name)
			continue
		}
		role, client := roleOf[s.Command[0]]
		if !client {
			continue
		}
		if s.Command[0] == "work" {
			workers++
		}
		runs = append(runs, flagValue(s.Command, "--run"))
		env := func(k string) string {
			if v := s.Environment[k]; v != nil {
				return *v
			}
			return ""
		}
		if env("AERIE_NATS_URL") != "nats://nats:4222" {
			t.Errorf("%s: AERIE_NATS_URL %q, want nats://nats:4222", name, env("AERIE_NATS_URL"))
		}
		seed := env("AERIE_NATS_NKEY")
		if seed != "/etc/aerie/"+role+".nk" {
			t.Errorf("%s (aerie %s): AERIE_NATS_NKEY %q, want the %s seed /etc/aerie/%s.nk", name, s.Command[0], seed, role, role)
		}
		if m := mount(s, "aerie-auth"); m == nil || m.Target != path.Dir(seed) || !m.ReadOnly {
			t.Errorf("%s: want aerie-auth mounted read-only at %s, got %+v", name, path.Dir(seed), m)
		}
		switch s.Command[0] {
		case "work":
			if env("AERIE_BACKEND") != "http://sim:8000" {
				t.Errorf("%s: AERIE_BACKEND %q, want the simulator", name, env("AERIE_BACKEND"))
			}
			if s.StopGracePeriod == nil || *s.StopGracePeriod < types.Duration(60e9) {
				t.Errorf("%s: stop_grace_period %v: must cover --grace", name, s.StopGracePeriod)
			}
			requireDep(t, s, "produce", types.ServiceConditionCompletedSuccessfully)
		case "aggregate":
			if m := mount(s, "aerie-results"); m == nil || m.Target != flagValue(s.Command, "--data-dir") {
				t.Errorf("%s: want aerie-results mounted at --data-dir, got %+v", name, m)
			}
			requireDep(t, s, "produce", types.ServiceConditionCompletedSuccessfully)
		case "produce":
			requireDep(t, s, "nats", types.ServiceConditionHealthy)
			requireDep(t, s, "prompts", types.ServiceConditionCompletedSuccessfully)
		}
	}
	if workers != 2 {
		t.Errorf("%d workers, want 2", workers)
	}
	for _, r := range runs {
		if r == "" || r != runs[0] {
			t.Errorf("--run differs between services: %v", runs)
			break
		}
	}
	if got := p.Services["auth"].Command; !slices.Equal(got[:2], []string{"auth", "init"}) || mount(p.Services["auth"], "aerie-auth").Target != flagValue(got, "--out") {
		t.Errorf("auth: want `aerie auth init --out` into aerie-auth, got %v", got)
	}
	if got := p.Services["sim"].Command; got[0] != "sim" || !strings.HasPrefix(flagValue(got, "--listen"), "0.0.0.0:8000") {
		t.Errorf("sim: want aerie sim listening on 0.0.0.0:8000 for the workers, got %v", got)
	}
	prompts, produce := p.Services["prompts"].Command, p.Services["produce"].Command
	if flagValue(prompts, "--out") != flagValue(produce, "--prompts") {
		t.Errorf("produce --prompts %s is not the file gen-prompts writes (%s)", flagValue(produce, "--prompts"), flagValue(prompts, "--out"))
	}

	nats := p.Services["nats"]
	if !strings.HasPrefix(nats.Image, "nats:") {
		t.Errorf("nats: image %s, want the official nats image", nats.Image)
	}
	requireDep(t, nats, "auth", types.ServiceConditionCompletedSuccessfully)
	if nats.HealthCheck == nil || !strings.Contains(strings.Join(nats.HealthCheck.Test, " "), "/healthz?js-enabled-only=true") {
		t.Errorf("nats: want a health check on /healthz?js-enabled-only=true")
	}
	confTarget := flagValue(nats.Command, "-c")
	var confSource string
	for _, v := range nats.Volumes {
		if v.Target == confTarget {
			confSource = v.Source
		}
	}
	if confSource == "" {
		t.Fatalf("nats: -c %s is not mounted", confTarget)
	}
	checkNATSConf(t, confSource, path.Dir(confTarget), nats)
}

// checkNATSConf parses the demo's nats-server configuration with
// nats-server's own parser, including the users.conf that `aerie auth
// init` writes where the compose file mounts it, and checks what aerie
// relies on.
func checkNATSConf(t *testing.T, source, confDir string, nats types.ServiceConfig) {
	t.Helper()
	b, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^include\s+(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no include of users.conf: the server would admit anyone", source)
	}
	include := string(m[1])
	authMount := mount(nats, "aerie-auth")
	if authMount == nil || path.Join(confDir, path.Dir(include)) != authMount.Target {
		t.Errorf("nats: %s includes %s, but aerie-auth is mounted at %+v", source, include, authMount)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	authDir := filepath.Join(dir, filepath.FromSlash(path.Dir(include)))
	if out, err := exec.Command(aerieBinary(t), "auth", "init", "--out", authDir).CombinedOutput(); err != nil {
		t.Fatalf("aerie auth init: %v\n%s", err, out)
	}
	cfg, err := conf.ParseFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	if mp, _ := cfg["max_payload"].(int64); mp < 8<<20 {
		t.Errorf("%s: max_payload %v, want 8MB", source, cfg["max_payload"])
	}
	js, _ := cfg["jetstream"].(map[string]any)
	if js["sync_interval"] != "always" {
		t.Errorf("%s: jetstream.sync_interval %v, want always", source, js["sync_interval"])
	}
	if d, _ := js["store_dir"].(string); mount(nats, "nats-data") == nil || mount(nats, "nats-data").Target != d {
		t.Errorf("%s: store_dir %q is not on the nats-data volume", source, d)
	}
	authz, _ := cfg["authorization"].(map[string]any)
	users, _ := authz["users"].([]any)
	if len(users) != 4 {
		t.Errorf("%s: %d users from %s, want aerie's 4 roles", source, len(users), include)
	}
}

func requireDep(t *testing.T, s types.ServiceConfig, on, condition string) {
	t.Helper()
	if d, ok := s.DependsOn[on]; !ok || d.Condition != condition {
		t.Errorf("%s: want depends_on %s: %s", s.Name, on, condition)
	}
}

func mount(s types.ServiceConfig, volume string) *types.ServiceVolumeConfig {
	for i, v := range s.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Source == volume {
			return &s.Volumes[i]
		}
	}
	return nil
}

// flagValue is the value of --name in args, given as --name value or
// --name=value.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/schema"
)

// runBin runs the binary in dir with env added and returns its output.
func runBin(t *testing.T, bin, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// aerie run -h groups its flags under headings, the common ones first.
func TestRunHelpIsGrouped(t *testing.T) {
	bin := buildAerie(t)
	out, err := runBin(t, bin, t.TempDir(), nil, "help", "run")
	if err != nil {
		t.Fatalf("aerie help run: %v\n%s", err, out)
	}
	var headings []string
	where := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			headings = append(headings, line)
		}
		if name, ok := strings.CutPrefix(line, "  --"); ok && len(headings) > 0 {
			name, _, _ = strings.Cut(name, " ")
			where[name] = headings[len(headings)-1]
		}
	}
	if len(headings) < 6 || !strings.HasPrefix(headings[0], "Common") {
		t.Fatalf("headings %q: want Common first and the groups by concern after it\n%s", headings, out)
	}
	for _, name := range []string{"prompts", "backend", "run", "data-dir"} {
		if where[name] != headings[0] {
			t.Errorf("--%s is under %q, want %q", name, where[name], headings[0])
		}
	}
	for name, group := range map[string]string{"temperature": "Sampling", "window": "Scheduling", "grace": "Reliability",
		"log-level": "Observability", "umask": "Security", "sim-speed": "Simulator"} {
		if !strings.HasPrefix(where[name], group) {
			t.Errorf("--%s is under %q, want %s", name, where[name], group)
		}
	}
	same, err := runBin(t, bin, t.TempDir(), nil, "run", "-h")
	if err != nil || same != out {
		t.Errorf("aerie run -h differs from aerie help run (%v)", err)
	}
}

// runManifest reads run's manifest from the store an aerie run left in
// dataDir.
func runManifest(t *testing.T, dataDir, run string) *schema.Manifest {
	t.Helper()
	srv, err := broker.Start(broker.Config{StoreDir: filepath.Join(dataDir, "nats"), Port: -1, SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	m, err := schema.DecodeManifest(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The same settings as flags and as a --config file make the same run.
func TestRunConfigFileGivesTheSameManifest(t *testing.T) {
	bin := buildAerie(t)
	env := []string{"AERIE_LOG_LEVEL=warn", "AERIE_DATA_DIR=", "AERIE_BACKEND="}
	flags, file := t.TempDir(), t.TempDir()
	for _, dir := range []string{flags, file} {
		if out, err := runBin(t, bin, dir, env, "gen-prompts", "--count", "40", "--out", "p.jsonl"); err != nil {
			t.Fatalf("gen-prompts: %v\n%s", err, out)
		}
	}
	settings := [][2]string{
		{"prompts", "p.jsonl"}, {"run", "same"}, {"data-dir", "./data"}, {"sim-speed", "100"},
		{"temperature", "0.6"}, {"top-p", "0.9"}, {"max-tokens", "300"}, {"seed", "7"}, {"samples", "2"},
	}
	var args []string
	yaml := "# the same settings as flags\n"
	for _, s := range settings {
		args = append(args, "--"+s[0], s[1])
		yaml += s[0] + ": " + s[1] + "\n"
	}
	yaml += "chat-template-kwargs: {thinking: true}\n"
	args = append(args, "--chat-template-kwargs", `{"thinking":true}`)
	if err := os.WriteFile(filepath.Join(file, "run.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runBin(t, bin, flags, env, append([]string{"run"}, args...)...); err != nil {
		t.Fatalf("aerie run with flags: %v\n%s", err, out)
	}
	if out, err := runBin(t, bin, file, env, "run", "--config", "run.yaml"); err != nil {
		t.Fatalf("aerie run --config: %v\n%s", err, out)
	}
	a, b := runManifest(t, filepath.Join(flags, "data"), "same"), runManifest(t, filepath.Join(file, "data"), "same")
	for _, m := range []*schema.Manifest{a, b} {
		m.CreatedAt, m.Producer = time.Time{}, ""
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("the manifests differ:\nflags:  %s\nconfig: %s", ja, jb)
	}
	if a.Params.Temperature == nil || *a.Params.Temperature != 0.6 || a.Samples != 2 {
		t.Errorf("the manifest does not carry the settings: %s", ja)
	}
}

// A key that is no flag fails at once, naming the nearest flag; a flag
// wins over the environment, which wins over the file.
func TestConfigFileKeysAndPrecedence(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "work.yaml")
	if err := os.WriteFile(cfg, []byte("run: r\nbackend: http://file:8000\nwindow: 64\ngrace: 5s\nmax-windw: 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runBin(t, bin, dir, nil, "work", "--config", cfg)
	if err == nil || !strings.Contains(out, `unknown key "max-windw"`) || !strings.Contains(out, "--max-window") {
		t.Fatalf("a wrong key: %v\n%s", err, out)
	}
	if err := os.WriteFile(cfg, []byte("run: r\nbackend: http://file:8000\nwindow: 64\ngrace: 5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runBin(t, bin, dir, []string{"AERIE_BACKEND=http://env:8000", "AERIE_API_KEY=sk-never-shown"},
		"work", "--config", cfg, "--grace", "9s", "--print-config")
	if err != nil {
		t.Fatalf("--print-config: %v\n%s", err, out)
	}
	for _, want := range []string{
		"run: r  # file", "backend: http://env:8000  # env AERIE_BACKEND", "window: 64  # file",
		"grace: 9s  # flag", "max-window: 1024  # default",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "sk-never-shown") {
		t.Errorf("--print-config shows the API key:\n%s", out)
	}
}

// What --print-config writes, every setting by group, is a config file
// that gives the same settings: numbers and booleans as such, a umask's
// leading zero kept, and the empty defaults of flags that refuse an
// empty value (a JSON object) read back as the defaults.
func TestPrintConfigReadsBack(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(cfg, []byte("prompts: in.jsonl\nrun: r\nmax-tokens: 4096\ntemperature: 0.6\nsamples: 2\nreturn-token-ids: true\numask: \"0022\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first, err := runBin(t, bin, dir, nil, "run", "--config", cfg, "--print-config")
	if err != nil {
		t.Fatalf("--print-config: %v\n%s", err, first)
	}
	for _, want := range []string{"# Sampling: ", "temperature: 0.6  # file", "samples: 2  # file",
		"return-token-ids: true  # file", `umask: "0022"  # file`, `chat-template-kwargs: ""  # default`} {
		if !strings.Contains(first, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, first)
		}
	}
	printed := filepath.Join(dir, "printed.yaml")
	if err := os.WriteFile(printed, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := runBin(t, bin, dir, nil, "run", "--config", printed, "--print-config")
	if err != nil {
		t.Fatalf("--config of what --print-config wrote: %v\n%s", err, second)
	}
	settings := func(out string) string {
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			if v, _, ok := strings.Cut(l, "  # "); ok {
				lines = append(lines, v)
			}
		}
		return strings.Join(lines, "\n")
	}
	if a, b := settings(first), settings(second); a != b {
		t.Errorf("read back, the settings differ:\nfirst:\n%s\nsecond:\n%s", a, b)
	}
}

//go:build linux

package main_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/hscheck"
	"github.com/aerie-dev/aerie/schema"
)

// standIn is what a README command names on real hosts and what stands
// in for it on this machine.
type standIn struct{ readme, here string }

// readmeStandIns are the only changes made to the README's production
// commands before they run. Every command runs in one network namespace
// where the three NATS nodes and the two GPU hosts are loopback
// addresses; the ports are the README's own. {dir} is the test's
// directory, where every host keeps its files.
var readmeStandIns = []standIn{
	{"/etc/aerie", "{dir}/etc-aerie"},    // the auth directory and TLS files, one for every host
	{" /data", " {dir}/data"},            // the data host's volume
	{"//nats-1:", "//127.0.10.1:"},       // the NATS nodes' host names, in URLs
	{"//nats-2:", "//127.0.10.2:"},       //
	{"//nats-3:", "//127.0.10.3:"},       //
	{"IP:10.0.0.1%s", "IP:127.0.10.%s"},  // and their addresses, in their certificates
	{"<run>", "kimi-k25-25k"},            // the run the inspection and export commands name
	{"--run demo", "--run kimi-k25-25k"}, // the run of the status sample
}

// nodeStandIns are node n's for the cluster block, which the README
// writes for the first node.
func nodeStandIns(n int) []standIn {
	return []standIn{
		{"0.0.0.0:", fmt.Sprintf("127.0.10.%d:", n)},
		{"/var/lib/aerie", fmt.Sprintf("{dir}/nats-%d", n)},
		{"nats-1", fmt.Sprintf("nats-%d", n)},
	}
}

// gpuStandIns are GPU host n's: its vLLM, on the host's loopback in
// the README, is a simulator on an address of its own here.
func gpuStandIns(n int) []standIn {
	return []standIn{{"http://127.0.0.1:8000", fmt.Sprintf("http://127.0.20.%d:8000", n)}}
}

// substitute applies stand-ins in order.
func substitute(text, dir string, ins ...[]standIn) string {
	for _, list := range ins {
		for _, s := range list {
			text = strings.ReplaceAll(text, s.readme, strings.ReplaceAll(s.here, "{dir}", dir))
		}
	}
	return text
}

// shellCommands splits a block into its commands: continuation lines
// joined, comment lines left out.
func shellCommands(block string) []string {
	var cmds []string
	var cur string
	for line := range strings.SplitSeq(block, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if more, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur += more
			continue
		}
		cmds = append(cmds, cur+trimmed)
		cur = ""
	}
	return cmds
}

// commandOf returns the one command of cmds that starts with prefix.
func commandOf(t *testing.T, block string, cmds []string, prefix string) string {
	t.Helper()
	var found []string
	for _, c := range cmds {
		if strings.HasPrefix(c, prefix) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("README block %s: %d commands start with %q, the test runs exactly one: %q", block, len(found), prefix, cmds)
	}
	return found[0]
}

// The README's production path, as written: credentials from `aerie
// auth init`, certificates from its OpenSSL recipe, a three-node aerie
// cluster with mutual TLS and role keys, doctor, produce with three
// replicas, two workers on two GPU hosts (simulators), the aggregator,
// status, the nats CLI's inspection commands, export, an EAGLE-3 run and
// replay of a dead letter (the one-machine block is TestREADMEOneMachine's).
// Each block is read from README.md and changed only by the stand-ins
// above.
func TestREADMEProductionPath(t *testing.T) {
	bin := buildAerie(t)
	natsCLI := findNatsCLI(t)
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl for the README's TLS recipe")
	}
	blocks := readREADMEBlocks(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "home") // no nats CLI context or aerie setting of the user's
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + filepath.Dir(natsCLI) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "NATS_CONTEXT=",
		"AERIE_LOG_LEVEL=info",
	}
	ns := newNetns(t, "prod", env)
	block := func(name string, more ...[]standIn) string {
		b, ok := blocks[name]
		if !ok {
			t.Fatalf("README.md has no block %q", name)
		}
		return substitute(b.text, dir, append([][]standIn{readmeStandIns}, more...)...)
	}
	const run = "kimi-k25-25k"
	writePrompts(t, ns, dir)

	// Credentials and certificates.
	ns.mustRun(t, dir, "set -e\n"+block("auth-init"), time.Minute)
	ns.mustRun(t, dir, "set -e\n"+block("tls"), time.Minute)
	ns.mustRun(t, dir, "set -e\n"+block("nats-context"), time.Minute)

	// Three nodes; ready once JetStream answers through the context.
	var nodes []*daemon
	for n := 1; n <= 3; n++ {
		cmds := shellCommands(block("cluster", nodeStandIns(n)))
		nodes = append(nodes, ns.start(t, fmt.Sprintf("nats-%d", n), dir, "exec "+commandOf(t, "cluster", cmds, "aerie server")))
	}
	// Clean-ups run last first: this one, while the nodes still run.
	t.Cleanup(func() { ns.keepState(t, dir, block("client-env")+"\n", run) })
	waitFor(t, "the cluster's JetStream", 90*time.Second, func() error {
		out, err := ns.run(dir, "nats stream ls", 20*time.Second)
		if err != nil && strings.Contains(out, "tls error") || strings.Contains(out, "Authorization Violation") {
			// Refused, not still starting: waiting will not change it.
			t.Fatalf("nats stream ls through the README's context: %v: %s%s", err, out, tails(nodes))
		}
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}, nodes...)

	// Two GPU hosts, each a simulator at the address its worker knows,
	// which takes the key in the workers' --api-key-file.
	const apiKey = "sk-readme-test"
	if err := os.WriteFile(filepath.Join(dir, "etc-aerie", "api-key"), []byte(apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var sims []*daemon
	for n := 1; n <= 2; n++ {
		sims = append(sims, ns.start(t, fmt.Sprintf("sim-%d", n), dir,
			fmt.Sprintf("exec aerie sim --listen 127.0.20.%d:8000 --api-key %s --speed 100 --max-model-len 40960 --output-median 60 --output-sigma 0.5", n, apiKey)))
	}
	clientEnv := block("client-env") + "\n"
	for _, s := range sims {
		addr := strings.TrimPrefix(s.name, "sim-")
		waitFor(t, "simulator "+addr, 30*time.Second, func() error {
			_, err := ns.run(dir, "exec 3<>/dev/tcp/127.0.20."+addr+"/8000", 5*time.Second)
			return err
		}, s)
	}

	// Doctor passes every check but one: the prompt too long for the
	// context, which it names.
	out, err := ns.run(dir, clientEnv+block("doctor", gpuStandIns(1)), 3*time.Minute)
	if err == nil || !strings.Contains(out, ", 1 failed,") ||
		!strings.Contains(out, "FAIL  context-length") || !strings.Contains(out, `"q-too-long"`) || strings.Count(out, "FAIL ") != 1 {
		t.Fatalf("doctor: %v, want one failed check, context-length naming q-too-long:\n%s", err, out)
	}
	t.Logf("doctor:\n%s", out)

	// The run: produce, a worker on each GPU host, the aggregator.
	runCmds := shellCommands(block("run"))
	out = ns.mustRun(t, dir, clientEnv+commandOf(t, "run", runCmds, "aerie produce"), 3*time.Minute)
	t.Logf("produce:\n%s", out)
	workCmd := commandOf(t, "run", runCmds, "aerie work")
	var workers []*daemon
	for n := 1; n <= 2; n++ {
		workers = append(workers, ns.start(t, fmt.Sprintf("worker-%d", n), dir, clientEnv+"exec "+substitute(workCmd, dir, gpuStandIns(n))))
	}
	aggCmd := clientEnv + "exec " + commandOf(t, "run", runCmds, "aerie aggregate")
	agg := ns.start(t, "aggregator", dir, aggCmd)
	agg.wait(t, 4*time.Minute, append(workers, sims...)...)
	outDir := filepath.Join(dir, "data", run)
	ids := checkOnceEach(t, outDir, readmePromptCount)
	if len(ids.failed) != 1 || ids.failed[0] != "q-too-long" {
		t.Errorf("failed.jsonl holds %q, want the one prompt too long for the context", ids.failed)
	}
	for _, w := range workers {
		waitFor(t, w.name+` logging "run done"`, 30*time.Second, func() error {
			if w.exited() {
				t.Fatalf("%s ended: %v\n%s", w.name, w.err, w.tail(30))
			}
			if !strings.Contains(w.tail(1000), `msg="run done`) {
				return errors.New("not yet")
			}
			return nil
		}, w)
	}

	// Watching: the status sample's commands print the sample's rows.
	checkStatusSample(t, ns, dir, clientEnv, block("status"))

	// Inspecting with the nats CLI.
	checkNatsInspect(t, ns, dir, shellCommands(block("nats-inspect")))
	for _, line := range shellCommands(block("inspect-commands")) {
		var out string
		var err error
		if strings.HasPrefix(line, "nats stream view ") {
			out, err = ns.onTerminal(dir, line, time.Minute)
		} else {
			out, err = ns.run(dir, line, time.Minute)
		}
		if err != nil || strings.Contains(out, "Error while translating") || !strings.Contains(out, `"id"`) {
			t.Errorf("%s: %v\n%s", line, err, out)
		}
	}

	// Export: answers of a simulator are refused as written, and
	// exported once they are allowed.
	checkExport(t, ns, dir, clientEnv, block("export"), len(ids.completed))

	// An EAGLE-3 run of every turn, queued as written, then answered by
	// a worker and written by an aggregator of its own.
	out = ns.mustRun(t, dir, clientEnv+block("eagle3"), 3*time.Minute)
	t.Logf("EAGLE-3 produce:\n%s", out)
	eagleWork := ns.start(t, "worker-eagle3", dir, clientEnv+"exec aerie work --nkey "+dir+"/etc-aerie/worker.nk --run kimi-sharegpt --backend http://127.0.20.1:8000 --api-key-file "+dir+"/etc-aerie/api-key --exit-when-done")
	ns.start(t, "aggregator-eagle3", dir, clientEnv+"exec aerie aggregate --nkey "+dir+"/etc-aerie/aggregator.nk --run kimi-sharegpt --data-dir "+dir+"/data --exit-when-done").wait(t, 3*time.Minute, eagleWork)
	eagleWork.wait(t, time.Minute)
	checkTurnsAll(t, filepath.Join(dir, "data", "kimi-sharegpt", "completions.jsonl"))

	// Replay the dead letter (once more too long: it fails again), with
	// the aggregator started again as the README says.
	if err := os.WriteFile(filepath.Join(dir, "ids.txt"), []byte("q-too-long\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out = ns.mustRun(t, dir, clientEnv+"set -e\n"+block("replay"), 3*time.Minute)
	t.Logf("replay:\n%s", out)
	if !strings.Contains(out, "q-too-long") {
		t.Errorf("replay did not name the dead-lettered prompt:\n%s", out)
	}
	ns.start(t, "aggregator-again", dir, aggCmd).wait(t, 3*time.Minute)
	again := checkOnceEach(t, outDir, readmePromptCount)
	if len(again.failed) != 1 || len(again.completed) != len(ids.completed) {
		t.Errorf("after replay: %d completed, %d failed; want %d and 1", len(again.completed), len(again.failed), len(ids.completed))
	}
	for _, w := range workers {
		w.stop(t)
		if w.err != nil {
			t.Errorf("%s on SIGTERM: %v\n%s", w.name, w.err, w.tail(20))
		}
	}
}

// readmePromptCount is the size of the production run: the generated
// prompts and one too long for the context.
const readmePromptCount = 301

// writePrompts writes the files the README's commands read: 300
// generated prompts and one of 12,000 words (past the simulators'
// 40,960-token context with max_tokens 32,768) as prompts.jsonl, and a
// ShareGPT file of two conversations as sharegpt.jsonl.
func writePrompts(t *testing.T, ns *netns, dir string) {
	t.Helper()
	ns.mustRun(t, dir, "aerie gen-prompts --count 300 --out prompts.jsonl", time.Minute)
	long, _ := json.Marshal(strings.Repeat("word ", 12000))
	f, err := os.OpenFile(filepath.Join(dir, "prompts.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `{"id":"q-too-long","messages":[{"role":"user","content":%s}]}`+"\n", long)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	share := `{"id":"c1","conversations":[{"from":"human","value":"What is a B-tree?"},{"from":"gpt","value":"x"},{"from":"human","value":"And a B+ tree?"},{"from":"gpt","value":"x"}]}
{"id":"c2","conversations":[{"from":"system","value":"Be brief."},{"from":"human","value":"What is a heap?"},{"from":"gpt","value":"x"}]}
`
	if err := os.WriteFile(filepath.Join(dir, "sharegpt.jsonl"), []byte(share), 0o600); err != nil {
		t.Fatal(err)
	}
}

// outcomeIDs are the ids of a run's two output files.
type outcomeIDs struct{ completed, failed []string }

// checkOnceEach reads a run's output files and fails the test unless
// every prompt has exactly one line in exactly one of them.
func checkOnceEach(t *testing.T, outDir string, want int) outcomeIDs {
	t.Helper()
	var ids outcomeIDs
	seen := map[string]string{}
	for _, file := range []string{"completions.jsonl", "failed.jsonl"} {
		for _, id := range idsOf(t, filepath.Join(outDir, file)) {
			if prev, ok := seen[id]; ok {
				t.Errorf("%s written twice: in %s and %s", id, prev, file)
			}
			seen[id] = file
			if file == "completions.jsonl" {
				ids.completed = append(ids.completed, id)
			} else {
				ids.failed = append(ids.failed, id)
			}
		}
	}
	if len(seen) != want {
		t.Errorf("%s: %d prompts written, want %d", outDir, len(seen), want)
	}
	return ids
}

// idsOf returns the id of every line of a JSONL file.
func idsOf(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var line struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ids = append(ids, line.ID)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// statusRowsSometimes are rows of the status sample that only a run in
// that state shows: the test's run has no silent worker.
var statusRowsSometimes = map[string]bool{"stranded": true}

// checkStatusSample runs the commands of the README's status sample
// ("$ " lines) and checks that each prints the rows the sample shows
// for it: the label of every row of the run's view, and the column
// headings of the tables.
func checkStatusSample(t *testing.T, ns *netns, dir, clientEnv, sample string) {
	t.Helper()
	type shown struct {
		cmd  string
		want []string
	}
	var cmds []shown
	inLabels := false // in the "label  value" lines that open a command's output
	for line := range strings.SplitSeq(sample, "\n") {
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			cmds = append(cmds, shown{cmd: cmd})
			inLabels = true
			continue
		}
		if len(cmds) == 0 {
			continue
		}
		cur := &cmds[len(cmds)-1]
		switch {
		case strings.TrimSpace(line) == "":
			inLabels = false
		case strings.ToUpper(line) == line: // a table's headings
			cur.want = append(cur.want, strings.Fields(line)...)
			inLabels = false
		case inLabels:
			if label, _, _ := strings.Cut(line, "  "); !statusRowsSometimes[label] {
				cur.want = append(cur.want, label)
			}
		}
	}
	if len(cmds) != 2 {
		t.Fatalf("the README's status sample shows %d commands, the test expects 2 (the run's view and the list)", len(cmds))
	}
	for _, c := range cmds {
		out, err := ns.run(dir, clientEnv+c.cmd, time.Minute)
		if err != nil {
			t.Errorf("%s: %v\n%s", c.cmd, err, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s prints no %q, which the README's sample shows:\n%s", c.cmd, w, out)
			}
		}
		t.Logf("%s:\n%s", c.cmd, out)
	}
}

// checkNatsInspect runs the README's nats CLI commands. The two that
// follow live messages (nats sub) run for five seconds: they pass once
// subscribed, and the one on all events must have received a worker's
// heartbeat.
func checkNatsInspect(t *testing.T, ns *netns, dir string, cmds []string) {
	t.Helper()
	for _, line := range cmds {
		var out string
		var err error
		switch {
		case strings.HasPrefix(line, "nats sub "):
			out, err = ns.run(dir, "timeout -s INT 5 "+line+"\ntest $? = 124", 30*time.Second)
			if err == nil && !strings.Contains(out, "Subscribing on") {
				err = errors.New("did not subscribe")
			}
			if err == nil && strings.Contains(line, "'aerie.events.>'") && !strings.Contains(out, "heartbeat") {
				err = errors.New("no heartbeat in five seconds")
			}
		case strings.HasPrefix(line, "nats stream view "):
			out, err = ns.onTerminal(dir, line, time.Minute)
		default:
			out, err = ns.run(dir, line, time.Minute)
		}
		if err == nil && strings.Contains(out, "nats: error:") {
			err = errors.New("it printed an error")
		}
		if err != nil {
			t.Errorf("%s: %v\n%s", line, err, out)
		}
	}
}

// checkExport runs the README's export block: on a simulator's answers
// it must refuse, naming --allow-simulated; with that flag it must write
// one row per answer.
func checkExport(t *testing.T, ns *netns, dir, clientEnv, block string, answers int) {
	t.Helper()
	cmds := shellCommands(block)
	if len(cmds) != 1 {
		t.Fatalf("the README's export block has %d commands, the test runs one", len(cmds))
	}
	out, err := ns.run(dir, clientEnv+cmds[0], time.Minute)
	if err == nil || !strings.Contains(out, "--allow-simulated") {
		t.Fatalf("%s on a simulator's answers: %v, want a refusal naming --allow-simulated:\n%s", cmds[0], err, out)
	}
	ns.mustRun(t, dir, clientEnv+cmds[0]+" --allow-simulated", time.Minute)
	rows := idsOf(t, filepath.Join(dir, "train.jsonl"))
	if len(rows) != answers {
		t.Errorf("train.jsonl: %d rows, want %d", len(rows), answers)
	}
	b, err := os.ReadFile(filepath.Join(dir, "train.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	for _, w := range []string{`"conversations":[`, `"role":"assistant"`, `"status":"success"`} {
		if !strings.Contains(first, w) {
			t.Errorf("train.jsonl's first row lacks %s: %s", w, first)
		}
	}
}

// checkTurnsAll checks the EAGLE-3 run's output: every conversation
// written once, with every assistant turn generated.
func checkTurnsAll(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	turns := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var l struct {
			ID    string `json:"id"`
			Turns int    `json:"turns"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if _, ok := turns[l.ID]; ok {
			t.Errorf("%s: %s written twice", path, l.ID)
		}
		turns[l.ID] = l.Turns
	}
	if turns["c1"] != 2 || turns["c2"] != 1 || len(turns) != 2 {
		t.Errorf("%s: turns generated %v, want c1 2 and c2 1", path, turns)
	}
}

// The README's one-machine block, as written, in a network namespace of
// its own (its commands use the default addresses): a server, a
// simulator, 2,000 generated prompts, produce, a worker and the
// aggregator, which must exit once every prompt is written once.
func TestREADMEOneMachine(t *testing.T) {
	bin := buildAerie(t)
	b, ok := readREADMEBlocks(t)["one-machine"]
	if !ok {
		t.Fatal(`README.md has no block "one-machine"`)
	}
	dir := t.TempDir()
	ns := newNetns(t, "one", []string{
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + dir, "AERIE_LOG_LEVEL=info",
	})
	started := runSeparately(t, ns, dir, "one-machine", b.text)
	ids := checkOnceEach(t, filepath.Join(dir, "data", "dev"), 2000)
	if len(ids.failed) != 0 {
		t.Errorf("%d prompts failed: %q", len(ids.failed), ids.failed)
	}
	for _, d := range started {
		if d.exited() {
			t.Errorf("%s ended before it was stopped: %v\n%s", d.name, d.err, d.tail(20))
		}
	}
}

// The README's extraction block, as written, in a network namespace of
// its own: a server, a simulator that extracts, 500 generated samples,
// produce with its checks against the server, a worker and the
// aggregator, which must exit once every sample's file is published
// once and the dataset is written beside them.
func TestREADMEExtraction(t *testing.T) {
	bin := buildAerie(t)
	b, ok := readREADMEBlocks(t)["extract"]
	if !ok {
		t.Fatal(`README.md has no block "extract"`)
	}
	dir := t.TempDir()
	ns := newNetns(t, "hs", []string{
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + dir, "AERIE_LOG_LEVEL=info",
	})
	if err := os.MkdirAll(filepath.Join(dir, "data", "vllm-hidden-states"), 0o755); err != nil {
		t.Fatal(err)
	}
	started := runSeparately(t, ns, dir, "extract", b.text)
	out := filepath.Join(dir, "data", "hs-dev")
	m, err := schema.DecodeManifest(mustReadFile(t, filepath.Join(out, "manifest.json")))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := hscheck.Check(m, out, filepath.Join(out, "completions.jsonl"), filepath.Join(out, "failed.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Files != 500 || rep.Rows != 500 {
		t.Errorf("output: %s", rep)
	}
	for _, d := range started {
		if d.exited() {
			t.Errorf("%s ended before it was stopped: %v\n%s", d.name, d.err, d.tail(20))
		}
	}
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runSeparately runs a README block of six commands as separate
// processes do on one machine (server, sim, a generator, produce, work,
// aggregate): the server, the simulator and the worker started and left
// running, the others run to their end, the aggregator last. It returns
// the processes left running.
func runSeparately(t *testing.T, ns *netns, dir, name, block string) []*daemon {
	t.Helper()
	cmds := shellCommands(block)
	if len(cmds) != 6 {
		t.Fatalf("the %s block has %d commands, the test runs 6 (server, sim, gen-prompts, produce, work, aggregate): %q", name, len(cmds), cmds)
	}
	var started []*daemon
	for i, c := range cmds {
		word := strings.Fields(c)[1]
		switch word {
		case "server", "sim", "work":
			d := ns.start(t, word, dir, "exec "+c)
			started = append(started, d)
			if addr := map[string]string{"server": "4222", "sim": "8000"}[word]; addr != "" {
				waitFor(t, c, 30*time.Second, func() error {
					if d.exited() {
						return fmt.Errorf("exited: %v", d.err)
					}
					_, err := ns.run(dir, "exec 3<>/dev/tcp/127.0.0.1/"+addr, 5*time.Second)
					return err
				}, d)
			}
		case "aggregate":
			ns.start(t, word, dir, "exec "+c).wait(t, 5*time.Minute)
		default:
			if out, err := ns.run(dir, c, 2*time.Minute); err != nil {
				t.Fatalf("%s command %d, %s: %v\n%s", name, i+1, c, err, out)
			}
		}
	}
	return started
}

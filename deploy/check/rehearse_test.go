package check

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The rehearsals run what the deployment files say, as local processes:
// the commands, arguments and environment of aerie's containers with a
// freshly built aerie, against a nats-server run in-process from the
// deployment's own configuration and users.conf. Only what a container
// engine or a cluster would provide is rewritten, each rule explicit:
//
//   - a mount becomes a symbolic link at <root><mount path> in a
//     directory of the container's own, and an absolute argument or
//     environment value under a mount path is prefixed with that root
//     (a path under no mount is left alone, and fails as it would in
//     the container);
//   - a service address //host:port of a server this rehearsal runs
//     becomes //127.0.0.1:<port it got>, and --listen, --metrics-listen
//     and --http-listen host:port become 127.0.0.1:0;
//   - the NATS server listens on random ports on 127.0.0.1 and keeps its
//     store in the store directory's volume (compose) or a temporary
//     directory (Kubernetes);
//   - a server's "started" is when it logs its address, not when its
//     process starts.
//
// Anything else (a flag, an environment variable name, a seed path, a
// permission) is as written, so a mistake there fails here as it would on
// the first `docker compose up` or `kubectl apply`. Not rehearsed: the
// image's user, read-only root and dropped capabilities, resource limits,
// restarts, and the network between containers (see the static tests).

// rehearsalTimeout bounds a whole rehearsal.
const rehearsalTimeout = 60 * time.Second

// natsLog records what the NATS server logs, for the permission check.
type natsLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *natsLog) add(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(format, v...))
}

func (l *natsLog) Noticef(format string, v ...any) { l.add("[INF]", format, v...) }
func (l *natsLog) Warnf(format string, v ...any)   { l.add("[WRN]", format, v...) }
func (l *natsLog) Fatalf(format string, v ...any)  { l.add("[FTL]", format, v...) }
func (l *natsLog) Errorf(format string, v ...any)  { l.add("[ERR]", format, v...) }
func (l *natsLog) Debugf(format string, v ...any)  { l.add("[DBG]", format, v...) }
func (l *natsLog) Tracef(format string, v ...any)  { l.add("[TRC]", format, v...) }

// violations are the logged lines that tell of a refused client: a
// permission or authorization violation.
func (l *natsLog) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, "Violation") {
			out = append(out, line)
		}
	}
	return out
}

// startNATS runs nats-server in-process from the configuration file at
// conf (its includes resolved next to it, as nats-server does), on
// random ports of 127.0.0.1, with the store directory mapped by
// storeDir. It returns the server and the client and monitoring ports
// the configuration asked for, which the clients' URLs name.
func startNATS(t *testing.T, conf string, storeDir func(string) string) (s *server.Server, log *natsLog, clientPort, httpPort int, err error) {
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("nats-server -c %s: %w", conf, err)
	}
	clientPort, httpPort = opts.Port, opts.HTTPPort
	opts.Host, opts.Port = "127.0.0.1", -1
	if opts.HTTPPort != 0 {
		opts.HTTPHost, opts.HTTPPort = "127.0.0.1", -1
	}
	opts.StoreDir = storeDir(opts.StoreDir)
	opts.NoSigs = true
	s, err = server.NewServer(opts)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("nats-server -c %s: %w", conf, err)
	}
	log = &natsLog{}
	s.SetLoggerV2(log, false, false, false)
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		return nil, nil, 0, 0, fmt.Errorf("nats-server -c %s: not ready after 10s", conf)
	}
	return s, log, clientPort, httpPort, nil
}

// container is the file system view of one container: root holds a
// symbolic link at each mount path.
type container struct {
	root   string
	mounts []string
}

// newContainer links each mount path (container path to host path) under
// a new root directory.
func newContainer(t *testing.T, mounts map[string]string) *container {
	t.Helper()
	c := &container{root: t.TempDir()}
	for target, source := range mounts {
		link := filepath.Join(c.root, filepath.FromSlash(target))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(source, link); err != nil {
			t.Fatal(err)
		}
		c.mounts = append(c.mounts, target)
	}
	return c
}

// path rewrites v when it is an absolute path under one of the mounts,
// alone or as the value of --flag=v.
func (c *container) path(v string) string {
	prefix := ""
	if strings.HasPrefix(v, "-") {
		name, val, ok := strings.Cut(v, "=")
		if !ok {
			return v
		}
		prefix, v = name+"=", val
	}
	for _, m := range c.mounts {
		if v == m || strings.HasPrefix(v, strings.TrimSuffix(m, "/")+"/") {
			return prefix + filepath.Join(c.root, filepath.FromSlash(v))
		}
	}
	return prefix + v
}

// hosts maps the service addresses the deployment files name
// (host:port) to where this rehearsal's servers listen.
type hosts struct {
	mu sync.Mutex
	m  map[string]string
}

func (h *hosts) set(service string, port int, addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]string{}
	}
	h.m[service+":"+strconv.Itoa(port)] = addr
}

// rewrite replaces //host:port of every known service in v.
func (h *hosts) rewrite(v string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for from, to := range h.m {
		v = strings.ReplaceAll(v, "//"+from, "//"+to)
	}
	return v
}

// proc is one container's process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *syncBuffer
	done   chan struct{}
	err    error
	listen chan string // the address logged by a server started with --listen
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// servingURL is how aerie sim logs its address, in either log format.
var servingURL = regexp.MustCompile(`"?url"?[=:]"?http://([0-9.]+:[0-9]+)`)

// runAerie starts aerie with args and exactly env (no variable of the
// test's own environment) in c's root. A --listen address becomes
// 127.0.0.1:0, and the address the server then logs is sent on listen;
// a --metrics-listen or --http-listen address becomes 127.0.0.1:0 too.
// The process gets SIGTERM when ctx ends, as a container being stopped.
func runAerie(t *testing.T, ctx context.Context, name string, c *container, args []string, env map[string]string, h *hosts) *proc {
	t.Helper()
	args = slices.Clone(args)
	listening := false
	for i, a := range args {
		if a == "--listen" && i+1 < len(args) {
			args[i+1] = "127.0.0.1:0"
			listening = true
			continue
		}
		if strings.HasPrefix(a, "--listen=") {
			args[i] = "--listen=127.0.0.1:0"
			listening = true
			continue
		}
		// Each container has its own network: here the services share
		// one, so every metrics and live page port becomes a free one.
		if (a == "--metrics-listen" || a == "--http-listen") && i+1 < len(args) {
			args[i+1] = "127.0.0.1:0"
			continue
		}
		if flag, _, ok := strings.Cut(a, "="); ok && (flag == "--metrics-listen" || flag == "--http-listen") {
			args[i] = flag + "=127.0.0.1:0"
			continue
		}
		args[i] = h.rewrite(c.path(a))
	}
	envList := []string{} // not nil: nothing of the test's own environment
	for k, v := range env {
		envList = append(envList, k+"="+h.rewrite(c.path(v)))
	}
	slices.Sort(envList)
	p := &proc{name: name, out: &syncBuffer{}, done: make(chan struct{}), listen: make(chan string, 1)}
	p.cmd = exec.CommandContext(ctx, aerieBinary(t), args...)
	p.cmd.Env = envList
	p.cmd.Dir = c.root
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = 30 * time.Second
	var stderr io.Writer = p.out
	var pw *io.PipeWriter
	if listening {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		stderr = io.MultiWriter(p.out, pw)
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				if m := servingURL.FindStringSubmatch(sc.Text()); m != nil {
					p.listen <- m[1]
					break
				}
			}
			io.Copy(io.Discard, pr)
		}()
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, stderr
	fmt.Fprintf(p.out, "$ aerie %s\n  env %v\n", strings.Join(args, " "), envList)
	if err := p.cmd.Start(); err != nil {
		t.Errorf("%s: %v", name, err)
		p.err = err
		close(p.done)
		return p
	}
	go func() {
		p.err = p.cmd.Wait()
		if pw != nil {
			pw.Close()
		}
		close(p.done)
	}()
	return p
}

// exited waits for p to exit and reports whether it did with status 0.
func (p *proc) exited(ctx context.Context) (bool, error) {
	select {
	case <-p.done:
		return p.err == nil, p.err
	case <-ctx.Done():
		return false, fmt.Errorf("%s still running: %w", p.name, ctx.Err())
	}
}

// waitHTTP waits until url answers 200.
func waitHTTP(ctx context.Context, url string) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not healthy: %v", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// imageConfig is the final stage's ENV and ENTRYPOINT of the Dockerfile.
func imageConfig(t *testing.T) (env map[string]string, entrypoint []string) {
	t.Helper()
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	env = map[string]string{}
	for _, c := range stages[len(stages)-1].Commands {
		switch c := c.(type) {
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				env[kv.Key] = kv.Value
			}
		case *instructions.EntrypointCommand:
			entrypoint = c.CmdLine
		}
	}
	return env, entrypoint
}

// completions reads <dir>/completions.jsonl: its line count and the
// workers that wrote them.
func completions(t *testing.T, file string) (lines int, workers map[string]int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the run's output: %v", err)
	}
	workers = map[string]int{}
	for line := range bytes.Lines(b) {
		var c struct {
			Worker string `json:"worker"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("%s line %d: %v", file, lines+1, err)
		}
		lines++
		workers[c.Worker]++
	}
	return lines, workers
}

// heartbeats records the workers heard on aerie's heartbeat subjects
// (aerie.events.<run>.heartbeat.<worker>), watched with the admin seed as
// an operator would with the nats CLI.
type heartbeats struct {
	mu      sync.Mutex
	workers map[string]int
}

func watchHeartbeats(t *testing.T, url, adminSeed string) (*heartbeats, error) {
	opt, err := nats.NkeyOptionFromSeed(adminSeed)
	if err != nil {
		return nil, fmt.Errorf("admin seed: %w", err)
	}
	nc, err := nats.Connect(url, opt, nats.Name("deploy check"))
	if err != nil {
		return nil, fmt.Errorf("connect with the admin seed: %w", err)
	}
	t.Cleanup(nc.Close)
	hb := &heartbeats{workers: map[string]int{}}
	_, err = nc.Subscribe("aerie.events.*.heartbeat.*", func(m *nats.Msg) {
		var h struct {
			Worker string `json:"worker"`
		}
		if json.Unmarshal(m.Data, &h) == nil {
			hb.mu.Lock()
			hb.workers[h.Worker]++
			hb.mu.Unlock()
		}
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("subscribe to heartbeats: %w", err)
	}
	return hb, nil
}

func (hb *heartbeats) names() []string {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	var out []string
	for w := range hb.workers {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// lastLines is the end of a process's output, for an error message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

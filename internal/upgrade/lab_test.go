//go:build linux

package upgrade_test

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// model is what the simulator serves and the runs ask for.
const model = "moonshotai/Kimi-K2.5"

// lab is one set of aerie processes on loopback: a NATS server, a
// simulator, and the roles a test starts, each logging to a file of its
// own in dir.
type lab struct {
	t       *testing.T
	dir     string
	natsURL string
	simURL  string
	data    string
	nc      *nats.Conn
	js      jetstream.JetStream

	mu    sync.Mutex
	procs []*proc
}

// proc is one aerie process.
type proc struct {
	name    string
	started time.Time
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
	err     error
}

// newLab starts a NATS server and a simulator with bin (a build of
// today's source: the server does not change in an upgrade of aerie's
// roles), answering simSpeed times faster than real time with answers of
// median tokens.
func newLab(t *testing.T, bin string, simSpeed float64, median int) *lab {
	t.Helper()
	l := &lab{t: t, dir: t.TempDir()}
	l.data = filepath.Join(l.dir, "data")
	t.Cleanup(l.stopAll)
	natsAddr, simAddr := freeAddr(t), freeAddr(t)
	server := l.start(bin, "nats", "server", "--listen", natsAddr, "--store", filepath.Join(l.dir, "store"))
	l.waitTCP(natsAddr, server)
	sim := l.start(bin, "sim", "sim", "--listen", simAddr, "--speed", strconv.FormatFloat(simSpeed, 'g', -1, 64),
		"--output-median", strconv.Itoa(median), "--model", model, "--seed", "7")
	l.waitTCP(simAddr, sim)
	l.natsURL, l.simURL = "nats://"+natsAddr, "http://"+simAddr
	nc, err := nats.Connect(l.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	l.nc = nc
	if l.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return l
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs bin with args, logging to <dir>/<name>.log.
func (l *lab) start(bin, name string, args ...string) *proc {
	l.t.Helper()
	path := filepath.Join(l.dir, name+".log")
	f, err := os.Create(path)
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "AERIE_LOG_FORMAT=text")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		l.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, started: time.Now(), cmd: cmd, log: path, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p
}

// stopAll kills every process still running; on failure it prints the
// end of each log.
func (l *lab) stopAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.procs {
		p.kill()
		if l.t.Failed() {
			l.t.Logf("--- %s (%s):\n%s", p.name, p.status(), p.tail(15))
		}
	}
}

// kill sends SIGKILL, as a host losing power would, and waits for the
// process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) status() string {
	switch {
	case !p.exited():
		return "running"
	case p.err == nil:
		return "exit 0"
	}
	return p.err.Error()
}

// wait waits up to timeout for the process to end on its own.
func (p *proc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %v", p.name, timeout)
	}
}

func (p *proc) text() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.text(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitTCP waits until addr accepts connections, or fails the test when p
// exits first or 30 s pass.
func (l *lab) waitTCP(addr string, p *proc) {
	l.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if p.exited() || time.Now().After(deadline) {
			l.t.Fatalf("%s does not accept connections at %s (%s):\n%s", p.name, addr, p.status(), p.tail(20))
		}
		select {
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// run runs bin to its end, failing the test when it fails.
func (l *lab) run(bin, name string, args ...string) string {
	l.t.Helper()
	p := l.start(bin, name, args...)
	if err := p.wait(5 * time.Minute); err != nil {
		l.t.Fatalf("%s: %v\n%s", name, err, p.tail(30))
	}
	return p.text()
}

// prompts writes n prompts with bin's gen-prompts and returns the file.
func (l *lab) prompts(bin string, n int) string {
	l.t.Helper()
	path := filepath.Join(l.dir, fmt.Sprintf("prompts-%d.jsonl", n))
	l.run(bin, "gen-prompts", "gen-prompts", "--count", strconv.Itoa(n), "--out", path, "--seed", "11")
	return path
}

// produce queues run from file with bin; extra are more flags.
func (l *lab) produce(bin, run, file string, extra ...string) {
	l.t.Helper()
	l.run(bin, "produce-"+run, append([]string{"produce", "--nats", l.natsURL, "--run", run, "--prompts", file,
		"--model", model, "--max-tokens", "400"}, extra...)...)
}

// worker starts a worker of run with bin, named name.
func (l *lab) worker(bin, name, run string, window int) *proc {
	return l.start(bin, name, "work", "--nats", l.natsURL, "--run", run, "--backend", l.simURL,
		"--name", name, "--window", strconv.Itoa(window), "--grace", "2s")
}

// aggregator starts the run's aggregator with bin; it exits once the run
// is done.
func (l *lab) aggregator(bin, name, run string) *proc {
	return l.start(bin, name, "aggregate", "--nats", l.natsURL, "--run", run, "--data-dir", l.data,
		"--exit-when-done", "--event-interval", "1s")
}

// line is what the tests read of an output line.
type line struct {
	ID     string `json:"id"`
	Sample int    `json:"sample"`
	Worker string `json:"worker"`
}

// lines reads a run's output file; a missing file has none.
func (l *lab) lines(run, file string) []line {
	l.t.Helper()
	f, err := os.Open(filepath.Join(l.data, run, file))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var ln line
		if err := json.Unmarshal(sc.Bytes(), &ln); err != nil {
			l.t.Fatalf("%s of run %s: a line that is not JSON: %v", file, run, err)
		}
		out = append(out, ln)
	}
	return out
}

// written counts the lines of completions.jsonl, cheaply, while the
// aggregator writes it.
func (l *lab) written(run string) int {
	b, _ := os.ReadFile(filepath.Join(l.data, run, "completions.jsonl"))
	return bytes.Count(b, []byte("\n"))
}

// exactlyOnce checks that every sample of every prompt of the input is in
// completions.jsonl exactly once, and nothing else is, and returns the
// lines by worker.
func (l *lab) exactlyOnce(run string, prompts, samples int) map[string]int {
	l.t.Helper()
	done := l.lines(run, "completions.jsonl")
	if failed := l.lines(run, "failed.jsonl"); len(failed) > 0 {
		l.t.Errorf("run %s: %d lines in failed.jsonl, want none (the simulator injects no faults)", run, len(failed))
	}
	seen := map[string]int{}
	byWorker := map[string]int{}
	ids := map[string]bool{}
	for _, ln := range done {
		seen[ln.ID+"/"+strconv.Itoa(ln.Sample)]++
		byWorker[ln.Worker]++
		ids[ln.ID] = true
	}
	twice := 0
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	lost := prompts*samples - len(seen)
	if len(ids) != prompts || lost != 0 || twice != 0 || len(done) != prompts*samples {
		l.t.Errorf("run %s: %d lines for %d prompts of %d samples: %d units lost, %d written twice",
			run, len(done), len(ids), samples, lost, twice)
	}
	for u := range seen {
		id, s, _ := strings.Cut(u, "/")
		if k, _ := strconv.Atoi(s); id == "" || k < 0 || k >= samples {
			l.t.Errorf("run %s: line %q is no sample of the run", run, u)
		}
	}
	return byWorker
}

// heartbeats collects the heartbeats of run as they are published.
type heartbeats struct {
	mu   sync.Mutex
	list []stamped
}

type stamped struct {
	at time.Time
	schema.Heartbeat
}

func (l *lab) heartbeats(run string) *heartbeats {
	l.t.Helper()
	h := &heartbeats{}
	sub, err := l.nc.Subscribe(schema.HeartbeatFilter(run), func(m *nats.Msg) {
		var hb schema.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil {
			h.mu.Lock()
			h.list = append(h.list, stamped{time.Now(), hb})
			h.mu.Unlock()
		}
	})
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return h
}

// of is worker's heartbeats so far.
func (h *heartbeats) of(worker string) []stamped {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []stamped
	for _, hb := range h.list {
		if hb.Worker == worker {
			out = append(out, hb)
		}
	}
	return out
}

// eventually polls cond every 50 ms until it holds, failing the test
// after timeout with what.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// events collects the run's throughput events as they are published.
type events struct {
	mu   sync.Mutex
	list []schema.Throughput
}

func (l *lab) events(run string) *events {
	l.t.Helper()
	e := &events{}
	sub, err := l.nc.Subscribe(schema.ThroughputSubject(run), func(m *nats.Msg) {
		var ev schema.Throughput
		if json.Unmarshal(m.Data, &ev) == nil {
			e.mu.Lock()
			e.list = append(e.list, ev)
			e.mu.Unlock()
		}
	})
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return e
}

// lacking reports whether an event said its aggregator lacks feature,
// which version by has.
func (e *events) lacking(feature, by string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.list {
		if slices.Contains(ev.AggregatorLacks, feature) && ev.AggregatorLacksWrittenBy == by {
			return true
		}
	}
	return false
}

// manifest reads the run's manifest from the runs bucket.
func (l *lab) manifest(run string) *schema.Manifest {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := l.js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		l.t.Fatal(err)
	}
	e, err := kv.Get(ctx, run)
	if err != nil {
		l.t.Fatal(err)
	}
	m, err := schema.DecodeManifest(e.Value())
	if err != nil {
		l.t.Fatal(err)
	}
	return m
}

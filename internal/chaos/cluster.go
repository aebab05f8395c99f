package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/schema"
)

// ClusterConfig describes a run against a three-node cluster of `aerie
// server` processes, with authenticated routes and role credentials,
// R3 streams, two workers and the aggregator, each NATS node, worker and
// the aggregator on a host of its own (a network namespace) when the
// machine allows it. Three faults come one after the other, each at a
// share of progress: the leader of AERIE_PROMPTS is killed (SIGKILL) and
// restarted later; one worker's host is cut off from the network for
// longer than AckWait and then reconnected; one node is stopped, its
// store deleted, and started again empty under its name. ClusterShort
// and ClusterLong return the two runs of the suite.
type ClusterConfig struct {
	// Bin is the aerie binary; Dir the work directory (it must exist);
	// Run the run's name. Required.
	Bin, Dir, Run string
	// Seed feeds gen-prompts and the simulator.
	Seed int64
	// Prompts is how many prompts are produced; Window each worker's
	// --window.
	Prompts, Window int
	// AckWait is produce's --ack-wait: how long the cut-off worker's
	// prompts stay with it before they are delivered again.
	AckWait time.Duration
	// StallTimeout is the workers' --first-token-timeout and
	// --idle-timeout.
	StallTimeout time.Duration
	// Speed, OutputMedian, OutputSigma and MaxTokens shape the
	// simulator's answers, as in Config. The simulator injects no faults
	// of its own: every redelivery comes from the cluster's faults.
	Speed        float64
	OutputMedian int
	OutputSigma  float64
	MaxTokens    int
	// LeaderKillAt, CutAt and WipeAt are the shares of progress at which
	// each fault starts; a fault waits for the one before to end.
	LeaderKillAt, CutAt, WipeAt float64
	// LeaderDown is how long the killed leader stays down, WipeDown the
	// wiped node.
	LeaderDown, WipeDown time.Duration
	// CutFor is how long the worker's host is off the network; more than
	// AckWait, so that its prompts go to the other worker.
	CutFor time.Duration
	// Loopback runs every process on 127.0.0.1 instead of in network
	// namespaces; the cut-off is then a SIGSTOP of the worker. Set when
	// the machine does not allow network namespaces.
	Loopback bool
	// Timeout bounds the run after produce.
	Timeout time.Duration
	// Logf receives one line per action; nil discards them.
	Logf func(format string, args ...any)
}

// ClusterShort is the run of `go test`: 900 prompts, the three faults, in
// a minute and a half on two cores. The faults come one after the other,
// each measured to its end, and the last must be over before the run is:
// with 600 prompts, on a busy machine, they took 43 s of a 47 s run, and
// the run ended first.
func ClusterShort() ClusterConfig {
	return ClusterConfig{
		Run: "cluster-short", Seed: 1, Prompts: 900, Window: 24,
		AckWait: 5 * time.Second, StallTimeout: 12 * time.Second,
		Speed: 6, OutputMedian: 400, OutputSigma: 0.35, MaxTokens: 900,
		LeaderKillAt: 0.1, CutAt: 0.25, WipeAt: 0.45,
		LeaderDown: 3 * time.Second, CutFor: 8 * time.Second, WipeDown: 2 * time.Second,
		Timeout: 4 * time.Minute,
	}
}

// ClusterLong is the run of `make chaos`: 3,000 prompts, the same faults
// with a longer cut-off.
func ClusterLong() ClusterConfig {
	c := ClusterShort()
	c.Run, c.Prompts, c.Window = "cluster", 3000, 40
	c.LeaderKillAt, c.CutAt, c.WipeAt = 0.15, 0.4, 0.65
	c.CutFor = 15 * time.Second
	c.Timeout = 15 * time.Minute
	return c
}

// Validate reports every problem with the configuration.
func (c ClusterConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("chaos: "+format, args...)) }
	if c.Bin == "" || c.Dir == "" || c.Run == "" {
		bad("Bin, Dir and Run are required")
	}
	if c.Prompts < 1 || c.Window < 1 {
		bad("need at least one prompt and a window of one, got %d and %d", c.Prompts, c.Window)
	}
	if c.AckWait <= 0 || c.StallTimeout <= 0 || c.Timeout <= 0 || c.Speed <= 0 {
		bad("ack wait, stall timeout, timeout and speed must be positive")
	}
	if c.CutFor <= c.AckWait {
		bad("the cut-off (%v) must last longer than AckWait (%v)", c.CutFor, c.AckWait)
	}
	if !(0 <= c.LeaderKillAt && c.LeaderKillAt <= c.CutAt && c.CutAt <= c.WipeAt && c.WipeAt < 1) {
		bad("want 0 <= LeaderKillAt <= CutAt <= WipeAt < 1, got %v, %v, %v", c.LeaderKillAt, c.CutAt, c.WipeAt)
	}
	return errors.Join(errs...)
}

// ClusterReport is what a cluster run did and measured.
type ClusterReport struct {
	Config ClusterConfig
	// Network says where the processes ran: network namespaces on a
	// bridge, or loopback and why.
	Network string
	// Wall is the whole run; Produce the time produce took.
	Wall, Produce time.Duration
	Outcome       *Outcome
	Leader        LeaderKill
	Cut           CutOff
	Wipe          Wipe
	// Unexpected lists processes that exited on their own.
	Unexpected []string
}

// LeaderKill is what the kill of AERIE_PROMPTS's leader measured, each
// time from the kill: Elected when the new leader took over (its
// leader_since in stream info), FirstResult when the first result was
// stored after the kill, FirstAfterElection the first stored after the
// new leader took over; and Current, from the restart, when the
// restarted node was current on every replicated stream again.
type LeaderKill struct {
	Node, NewLeader                                   string
	Elected, FirstResult, FirstAfterElection, Current time.Duration
}

// CutOff is what the cut-off of a worker's host measured. Redelivered is
// from the cut to the first result stored by the other worker for a
// prompt delivered more than once; FirstResult is from the reconnect to
// the cut-off worker's first result stored; DuringCut counts its results
// stored while it was off the network (none, with namespaces);
// Redeliveries the other worker's results, stored from the cut until
// AckWait after the reconnect, of prompts delivered more than once.
type CutOff struct {
	Worker, Mode             string
	Held                     time.Duration
	Redelivered, FirstResult time.Duration
	DuringCut, Redeliveries  int
}

// Wipe is what the rebuilt node measured: Current is from its restart,
// with an empty store, to when it was current on every replicated
// stream; PeerRemoved lists streams whose peer had to be removed by hand
// (an operator's `nats stream cluster peer-remove`) to get there.
type Wipe struct {
	Node        string
	Current     time.Duration
	PeerRemoved []string
}

func (r *ClusterReport) String() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "cluster run %s: %d prompts, 3 nodes (R3), 2 workers (window %d), ack wait %v; %s\n", c.Run, c.Prompts, c.Window, c.AckWait, r.Network)
	fmt.Fprintf(&b, "  wall %v (produce %v)\n", r.Wall.Round(100*time.Millisecond), r.Produce.Round(100*time.Millisecond))
	ms := func(d time.Duration) string {
		if d < 0 {
			return "not seen"
		}
		return d.Round(10 * time.Millisecond).String()
	}
	l := r.Leader
	fmt.Fprintf(&b, "  leader kill: %s (SIGKILL at %.0f%%): new leader %s took over %s after the kill; first result stored %s after the kill, first after the takeover %s after the kill; restarted after %v, current again %s after the restart\n",
		l.Node, 100*c.LeaderKillAt, l.NewLeader, ms(l.Elected), ms(l.FirstResult), ms(l.FirstAfterElection), c.LeaderDown, ms(l.Current))
	u := r.Cut
	fmt.Fprintf(&b, "  cut-off: %s (%s) for %v at %.0f%%: first redelivered prompt answered by the other worker %s after the cut (%d redelivered prompts answered by it); %d results from %s during the cut; its first result %s after the reconnect\n",
		u.Worker, u.Mode, u.Held.Round(10*time.Millisecond), 100*c.CutAt, ms(u.Redelivered), u.Redeliveries, u.DuringCut, u.Worker, ms(u.FirstResult))
	w := r.Wipe
	fmt.Fprintf(&b, "  store wiped: %s (stopped at %.0f%%, store deleted, restarted empty after %v): current on every replicated stream %s after the restart", w.Node, 100*c.WipeAt, c.WipeDown, ms(w.Current))
	if len(w.PeerRemoved) > 0 {
		fmt.Fprintf(&b, " (peer removed by hand on %s)", strings.Join(w.PeerRemoved, ", "))
	}
	b.WriteString("\n")
	if o := r.Outcome; o != nil {
		fmt.Fprintf(&b, "  outcome: %d prompts, %d completed, %d failed, %d duplicates, %d in both files, %d missing, %d unknown, %d unparseable\n",
			o.Prompts, o.Completed, o.Failed, len(o.Duplicates), len(o.InBoth), len(o.Missing), len(o.Unknown), len(o.Unparseable))
		if len(o.Missing) > 0 {
			fmt.Fprintf(&b, "  missing: %s\n", sample(o.Missing))
		}
		if len(o.Duplicates) > 0 {
			fmt.Fprintf(&b, "  duplicates: %s\n", sample(o.Duplicates))
		}
	}
	for _, u := range r.Unexpected {
		fmt.Fprintf(&b, "  exited on its own: %s\n", u)
	}
	return b.String()
}

// clusterNode is one `aerie server` of the cluster.
type clusterNode struct {
	name         string
	host         *labHost // nil on loopback
	client, peer string   // host:port for clients and for routes
	store        string
	proc         *process
	starts       int
}

// ClusterHarness does one cluster run. Close it when done, whatever Run
// returned: it kills every process it started and deletes the network
// namespaces it created.
type ClusterHarness struct {
	cfg   ClusterConfig
	logf  func(format string, args ...any)
	began time.Time

	logs, data, prompts, keys string
	lab                       *netLab
	simAddr                   string
	nodes                     []*clusterNode
	workers                   []*process
	workerHosts               []*labHost
	aggregator                *process
	aggHost                   *labHost

	mu      sync.Mutex
	procs   []*process
	pmu     sync.Mutex // guards progress, read by the faults and by conduct
	nc      *nats.Conn
	js      jetstream.JetStream
	results *resultLog

	progress progress
}

// NewCluster prepares a cluster run in cfg.Dir; it starts nothing.
func NewCluster(cfg ClusterConfig) (*ClusterHarness, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &ClusterHarness{
		cfg:     cfg,
		logf:    cfg.Logf,
		logs:    filepath.Join(cfg.Dir, "logs"),
		data:    filepath.Join(cfg.Dir, "data"),
		prompts: filepath.Join(cfg.Dir, "prompts.jsonl"),
		keys:    filepath.Join(cfg.Dir, "auth"),
	}
	if h.logf == nil {
		h.logf = func(string, ...any) {}
	}
	for _, d := range []string{h.logs, h.data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	out := filepath.Join(h.data, cfg.Run)
	h.progress = progress{
		total:       cfg.Prompts,
		completions: newLineCounter(filepath.Join(out, aggregator.CompletionsFile)),
		failed:      newLineCounter(filepath.Join(out, aggregator.FailedFile)),
	}
	return h, nil
}

// Close kills, by PID, every process the harness started that still
// runs, then deletes the network namespaces it created. It may be called
// more than once.
func (h *ClusterHarness) Close() {
	h.mu.Lock()
	procs := append([]*process(nil), h.procs...)
	nc, results := h.nc, h.results
	h.nc, h.results = nil, nil
	h.mu.Unlock()
	results.stop()
	if nc != nil {
		nc.Close()
	}
	for _, p := range procs {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once it runs
			p.kill()
		}
	}
	if h.lab != nil {
		if err := h.lab.close(); err != nil {
			h.log("cleaning up the network namespaces: %v", err)
		}
	}
}

func (h *ClusterHarness) log(format string, args ...any) {
	h.logf("[%6.1fs] %s", time.Since(h.began).Seconds(), fmt.Sprintf(format, args...))
}

// start runs an aerie command on host (nil: the harness's own network
// namespace) under a log name.
func (h *ClusterHarness) start(host *labHost, name string, args ...string) (*process, error) {
	bin := h.cfg.Bin
	if host != nil {
		args = append([]string{"netns", "exec", host.ns, bin}, args...)
		bin = "ip"
	}
	p, err := startProcess(bin, h.logs, name, args...)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	return p, nil
}

// run runs an aerie command to its end, within timeout.
func (h *ClusterHarness) run(name string, timeout time.Duration, args ...string) error {
	p, err := h.start(nil, name, args...)
	if err != nil {
		return err
	}
	if err := p.wait(timeout); err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, p.tail(20))
	}
	return nil
}

// Run does the whole run: sets up the hosts, starts the cluster, the
// simulator, the workers and the aggregator, produces, injects the three
// faults while measuring how long the cluster takes to recover from
// each, waits for the aggregator to finish and checks the output. The
// report is filled in as far as the run got, also on error.
func (h *ClusterHarness) Run(ctx context.Context) (*ClusterReport, error) {
	h.began = time.Now()
	rep := &ClusterReport{Config: h.cfg}
	defer func() { rep.Wall = time.Since(h.began) }()
	input, err := h.setUp(ctx, rep)
	if err != nil {
		return rep, err
	}
	runErr := h.conduct(ctx, rep)
	for _, p := range h.current() {
		if !p.stopped.Load() && p.exited() && p != h.aggregator {
			rep.Unexpected = append(rep.Unexpected, p.name+": "+p.exitStatus()+"\n"+p.tail(10))
		}
	}
	out := filepath.Join(h.data, h.cfg.Run)
	o, err := verify(input, false, filepath.Join(out, aggregator.CompletionsFile), filepath.Join(out, aggregator.FailedFile))
	if err != nil {
		return rep, errors.Join(runErr, err)
	}
	rep.Outcome = o
	return rep, runErr
}

// current lists the processes running the cluster, workers and
// aggregator now.
func (h *ClusterHarness) current() []*process {
	var ps []*process
	for _, n := range h.nodes {
		ps = append(ps, n.proc)
	}
	ps = append(ps, h.workers...)
	return append(ps, h.aggregator)
}

func (h *ClusterHarness) setUp(ctx context.Context, rep *ClusterReport) ([]inputPrompt, error) {
	if err := h.run("gen-prompts", 2*time.Minute, "gen-prompts", "--count", strconv.Itoa(h.cfg.Prompts),
		"--out", h.prompts, "--seed", strconv.FormatInt(h.cfg.Seed, 10)); err != nil {
		return nil, err
	}
	input, err := readInput(h.prompts, false)
	if err != nil {
		return nil, err
	}
	if err := h.run("auth-init", time.Minute, "auth", "init", "--out", h.keys); err != nil {
		return nil, err
	}
	if err := h.hosts(rep); err != nil {
		return nil, err
	}
	for _, n := range h.nodes {
		if err := h.startNode(ctx, n, h.routes()); err != nil {
			return nil, err
		}
	}
	if err := h.startSim(ctx); err != nil {
		return nil, err
	}
	if err := h.connect(ctx); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := h.run("produce", 5*time.Minute, "produce", "--nats", h.natsURLs(), "--nkey", h.seed(auth.Producer),
		"--run", h.cfg.Run, "--prompts", h.prompts, "--model", Model, "--max-tokens", strconv.Itoa(h.cfg.MaxTokens),
		"--ack-wait", h.cfg.AckWait.String(), "--replicas", "3"); err != nil {
		return nil, err
	}
	rep.Produce = time.Since(began)
	h.log("produced %d prompts on R3 streams in %v", h.cfg.Prompts, rep.Produce.Round(time.Millisecond))
	results, err := watchResults(ctx, h.js, h.cfg.Run)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.results = results
	h.mu.Unlock()
	for i := range 2 {
		if err := h.startWorker(i); err != nil {
			return nil, err
		}
	}
	p, err := h.start(h.aggHost, "aggregator", "aggregate", "--nats", h.natsURLs(), "--nkey", h.seed(auth.Aggregator),
		"--run", h.cfg.Run, "--data-dir", h.data, "--exit-when-done", "--event-interval", "1s")
	if err != nil {
		return nil, err
	}
	h.aggregator = p
	return input, nil
}

// hosts creates a network namespace per node, worker and aggregator on
// a private bridge, or falls back to loopback when that is not allowed.
func (h *ClusterHarness) hosts(rep *ClusterReport) error {
	if !h.cfg.Loopback {
		lab, err := newNetLab(h.log)
		if err != nil {
			h.cfg.Loopback = true
			rep.Network = "loopback (network namespaces not allowed here: " + err.Error() + "); the cut-off is a SIGSTOP of the worker"
			h.log("%s", rep.Network)
		} else {
			h.lab = lab
		}
	} else {
		rep.Network = "loopback (asked for); the cut-off is a SIGSTOP of the worker"
	}
	h.nodes = nil
	for i := range 3 {
		n := &clusterNode{name: fmt.Sprintf("nats-%d", i+1), store: filepath.Join(h.cfg.Dir, fmt.Sprintf("nats-%d", i+1))}
		if h.lab != nil {
			host, err := h.lab.addHost(n.name, 11+i)
			if err != nil {
				return err
			}
			n.host, n.client, n.peer = host, host.ip+":4222", host.ip+":6222"
		} else {
			var err error
			if n.client, err = freeAddr(); err != nil {
				return err
			}
			if n.peer, err = freeAddr(); err != nil {
				return err
			}
		}
		h.nodes = append(h.nodes, n)
	}
	h.workerHosts = make([]*labHost, 2)
	if h.lab != nil {
		for i := range h.workerHosts {
			host, err := h.lab.addHost(fmt.Sprintf("worker-%d", i+1), 21+i)
			if err != nil {
				return err
			}
			h.workerHosts[i] = host
		}
		host, err := h.lab.addHost("aggregator", 31)
		if err != nil {
			return err
		}
		h.aggHost = host
		rep.Network = fmt.Sprintf("network namespaces on a private bridge (%s0/24): one per node, worker and aggregator", h.lab.prefix)
		h.log("%s", rep.Network)
	}
	return nil
}

func (h *ClusterHarness) seed(r auth.Role) string { return filepath.Join(h.keys, auth.SeedFile(r)) }

// natsURLs lists every node's client URL, for --nats.
func (h *ClusterHarness) natsURLs() string {
	urls := make([]string, len(h.nodes))
	for i, n := range h.nodes {
		urls[i] = "nats://" + n.client
	}
	return strings.Join(urls, ",")
}

// startNode starts node n (again), on its ports and store, and waits
// until it accepts clients.
func (h *ClusterHarness) startNode(ctx context.Context, n *clusterNode, routes []string) error {
	n.starts++
	p, err := h.start(n.host, fmt.Sprintf("%s-%d", n.name, n.starts), "server", "--name", n.name,
		"--listen", n.client, "--cluster-listen", n.peer, "--routes", strings.Join(routes, ","),
		"--store", n.store, "--auth-dir", h.keys)
	if err != nil {
		return err
	}
	n.proc = p
	if err := waitTCP(ctx, n.client, p, 60*time.Second); err != nil {
		return fmt.Errorf("%s: %w\n%s", n.name, err, p.tail(20))
	}
	h.log("started %s (pid %d) on %s, routes on %s", n.name, p.pid(), n.client, n.peer)
	return nil
}

func (h *ClusterHarness) routes() []string {
	var routes []string
	for _, n := range h.nodes {
		routes = append(routes, "nats-route://"+n.peer)
	}
	return routes
}

func (h *ClusterHarness) startSim(ctx context.Context) error {
	host := "127.0.0.1"
	if h.lab != nil {
		host = h.lab.rootIP()
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	_, port, _ := strings.Cut(addr, ":")
	h.simAddr = host + ":" + port
	c := h.cfg
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	p, err := h.start(nil, "sim", "sim", "--listen", h.simAddr, "--speed", f(c.Speed),
		"--output-median", strconv.Itoa(c.OutputMedian), "--output-sigma", f(c.OutputSigma),
		"--max-num-seqs", "512", "--seed", strconv.FormatInt(c.Seed, 10))
	if err != nil {
		return err
	}
	return waitTCP(ctx, h.simAddr, p, 30*time.Second)
}

func (h *ClusterHarness) startWorker(i int) error {
	name := fmt.Sprintf("w%d", i+1)
	p, err := h.start(h.workerHosts[i], name, "work", "--nats", h.natsURLs(), "--nkey", h.seed(auth.Worker),
		"--run", h.cfg.Run, "--backend", "http://"+h.simAddr, "--window", strconv.Itoa(h.cfg.Window), "--name", name,
		"--grace", "2s", "--first-token-timeout", h.cfg.StallTimeout.String(), "--idle-timeout", h.cfg.StallTimeout.String())
	if err != nil {
		return err
	}
	h.workers = append(h.workers, p)
	h.log("started worker %s (pid %d)", name, p.pid())
	return nil
}

// connect opens the harness's own connection, as admin, to every node.
func (h *ClusterHarness) connect(ctx context.Context) error {
	nk, err := nats.NkeyOptionFromSeed(h.seed(auth.Admin))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(h.natsURLs(), nk, nats.Name("aerie-chaos-cluster"), nats.MaxReconnects(-1),
		nats.ReconnectWait(200*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	h.mu.Lock()
	h.nc, h.js = nc, js
	h.mu.Unlock()
	// JetStream answers once the nodes have elected a meta leader.
	return poll(ctx, time.Minute, func() (bool, error) {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(c)
		return err == nil, nil
	})
}

// poll calls cond every 50ms until it holds, fails, ctx ends or timeout
// passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// conduct injects the faults in turn while the aggregator works, then
// waits for it to finish.
func (h *ClusterHarness) conduct(ctx context.Context, rep *ClusterReport) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	faults := make(chan error, 1)
	go func() { faults <- h.faults(ctx, rep) }()
	var faultErr error
	faultsDone := false
	// The faults are over before conduct returns: they change the nodes.
	defer func() {
		if !faultsDone {
			cancel()
			<-faults
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last, lastAt := -1, time.Now()
	for {
		select {
		case faultErr = <-faults:
			faultsDone = true
			if faultErr != nil {
				return fmt.Errorf("fault injection: %w", faultErr)
			}
			h.log("faults done; progress %s", h.progressNow())
		case <-h.aggregator.done:
			h.log("aggregator exited (%s); progress %s", h.aggregator.exitStatus(), h.progressNow())
			if h.aggregator.err != nil {
				return fmt.Errorf("aggregator: %s\n%s", h.aggregator.exitStatus(), h.aggregator.tail(20))
			}
			if !faultsDone {
				return errors.New("the run ended before every fault was injected: lower the faults' shares or raise Prompts")
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%w: progress %s after %v", ErrStalled, h.progressNow(), h.cfg.Timeout)
		case <-tick.C:
			if n := h.lines(); n != last {
				if n/(h.cfg.Prompts/10+1) != last/(h.cfg.Prompts/10+1) {
					h.log("progress %s", h.progressNow())
				}
				last, lastAt = n, time.Now()
			} else if time.Since(lastAt) > 2*time.Minute {
				return fmt.Errorf("%w: no progress for two minutes at %s", ErrStalled, h.progressNow())
			}
		}
	}
}

func (h *ClusterHarness) lines() int {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	return h.progress.lines()
}

func (h *ClusterHarness) share() float64 {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	return h.progress.share()
}

func (h *ClusterHarness) progressNow() string {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	return h.progress.String()
}

// waitShare waits until progress reaches share.
func (h *ClusterHarness) waitShare(ctx context.Context, share float64) error {
	return poll(ctx, h.cfg.Timeout, func() (bool, error) { return h.share() >= share, nil })
}

// pause waits d (a fault's chosen length, not a synchronisation).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (h *ClusterHarness) faults(ctx context.Context, rep *ClusterReport) error {
	if err := h.killLeader(ctx, &rep.Leader); err != nil {
		return fmt.Errorf("leader kill: %w", err)
	}
	if err := h.cutWorker(ctx, &rep.Cut); err != nil {
		return fmt.Errorf("worker cut-off: %w", err)
	}
	if err := h.wipeNode(ctx, &rep.Wipe); err != nil {
		return fmt.Errorf("node store wipe: %w", err)
	}
	return nil
}

// leader returns the server name of AERIE_PROMPTS's leader ("" while
// there is none).
func (h *ClusterHarness) leader(ctx context.Context) string {
	l, _ := h.leaderSince(ctx)
	return l
}

// leaderSince returns AERIE_PROMPTS's leader and when it took over (zero
// when the server does not say).
func (h *ClusterHarness) leaderSince(ctx context.Context) (string, time.Time) {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := h.js.Stream(c, schema.PromptsStream)
	if err != nil {
		return "", time.Time{}
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return "", time.Time{}
	}
	var since time.Time
	if info.Cluster.LeaderSince != nil {
		since = *info.Cluster.LeaderSince
	}
	return info.Cluster.Leader, since
}

func (h *ClusterHarness) node(name string) *clusterNode {
	for _, n := range h.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (h *ClusterHarness) killLeader(ctx context.Context, m *LeaderKill) error {
	if err := h.waitShare(ctx, h.cfg.LeaderKillAt); err != nil {
		return err
	}
	var n *clusterNode
	if err := poll(ctx, time.Minute, func() (bool, error) { n = h.node(h.leader(ctx)); return n != nil, nil }); err != nil {
		return fmt.Errorf("no leader of %s: %w", schema.PromptsStream, err)
	}
	m.Node = n.name
	h.log("killing %s, leader of %s (SIGKILL); progress %s", n.name, schema.PromptsStream, h.progressNow())
	killed := time.Now()
	n.proc.kill()
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		l, since := h.leaderSince(ctx)
		if l != "" && l != n.name {
			m.NewLeader, m.Elected = l, time.Since(killed)
			if since.After(killed) {
				m.Elected = since.Sub(killed)
			}
			return true, nil
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("no new leader after killing %s: %w", n.name, err)
	}
	h.log("%s elected leader of %s %v after the kill", m.NewLeader, schema.PromptsStream, m.Elected.Round(time.Millisecond))
	if err := pause(ctx, h.cfg.LeaderDown); err != nil {
		return err
	}
	if err := h.startNode(ctx, n, h.routes()); err != nil {
		return err
	}
	restarted := time.Now()
	var err error
	if m.Current, err = h.waitCurrent(ctx, n.name, restarted); err != nil {
		return err
	}
	any := func(resultEntry) bool { return true }
	m.FirstResult = h.results.firstAfter(killed, any)
	if d := h.results.firstAfter(killed.Add(m.Elected), any); d >= 0 {
		m.FirstAfterElection = m.Elected + d
	} else {
		m.FirstAfterElection = -1
	}
	h.log("%s current again %v after its restart; first result stored %v after the kill, %v after it once the new leader took over",
		n.name, m.Current.Round(time.Millisecond), m.FirstResult.Round(time.Millisecond), m.FirstAfterElection.Round(time.Millisecond))
	return nil
}

// waitCurrent waits until node name is current on every replicated
// stream and returns the time since from.
func (h *ClusterHarness) waitCurrent(ctx context.Context, name string, from time.Time) (time.Duration, error) {
	var behind []string
	err := poll(ctx, 3*time.Minute, func() (bool, error) {
		behind = h.behind(ctx, name)
		return len(behind) == 0, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s not current on %s: %w", name, strings.Join(behind, ", "), err)
	}
	return time.Since(from), nil
}

// behind lists the replicated streams on which node name is not a
// current replica (or whose state could not be read).
func (h *ClusterHarness) behind(ctx context.Context, name string) []string {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []string
	names := h.js.StreamNames(c)
	var all []string
	for s := range names.Name() {
		all = append(all, s)
	}
	if names.Err() != nil || len(all) == 0 {
		return []string{"(stream list: " + fmt.Sprint(names.Err()) + ")"}
	}
	sort.Strings(all)
	for _, sn := range all {
		s, err := h.js.Stream(c, sn)
		if err != nil {
			out = append(out, sn+" ("+err.Error()+")")
			continue
		}
		info := s.CachedInfo()
		if info.Config.Replicas < 2 {
			continue
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			out = append(out, sn+" (no leader)")
			continue
		}
		if info.Cluster.Leader == name {
			continue
		}
		ok := false
		for _, r := range info.Cluster.Replicas {
			if r.Name == name && r.Current && !r.Offline && r.Lag == 0 {
				ok = true
			}
		}
		if !ok {
			out = append(out, sn)
		}
	}
	return out
}

func (h *ClusterHarness) cutWorker(ctx context.Context, m *CutOff) error {
	if err := h.waitShare(ctx, h.cfg.CutAt); err != nil {
		return err
	}
	w, other := h.workers[1], h.workers[0]
	m.Worker = w.name
	cut := func() error { return w.cmd.Process.Signal(syscall.SIGSTOP) }
	back := func() error { return w.cmd.Process.Signal(syscall.SIGCONT) }
	m.Mode = "SIGSTOP, loopback"
	if h.lab != nil {
		host := h.workerHosts[1]
		cut = func() error { return h.lab.cut(host.name) }
		back = func() error { return h.lab.reconnect(host.name) }
		m.Mode = "veth down"
	}
	h.log("cutting %s off the network for %v (%s); progress %s", w.name, h.cfg.CutFor, m.Mode, h.progressNow())
	if err := cut(); err != nil {
		return err
	}
	cutAt := time.Now()
	if err := pause(ctx, h.cfg.CutFor); err != nil {
		_ = back()
		return err
	}
	if err := back(); err != nil {
		return err
	}
	backAt := time.Now()
	m.Held = backAt.Sub(cutAt)
	h.log("%s reconnected after %v; progress %s", w.name, m.Held.Round(time.Millisecond), h.progressNow())
	m.DuringCut = h.results.count(func(e resultEntry) bool {
		return e.worker == w.name && e.stored.After(cutAt) && e.stored.Before(backAt)
	})
	redelivered := func(e resultEntry) bool { return e.worker == other.name && e.attempts > 1 }
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		return h.results.firstAfter(backAt, func(e resultEntry) bool { return e.worker == w.name }) >= 0, nil
	}); err != nil {
		return fmt.Errorf("no result from %s after its reconnect: %w", w.name, err)
	}
	m.FirstResult = h.results.firstAfter(backAt, func(e resultEntry) bool { return e.worker == w.name })
	m.Redelivered = h.results.firstAfter(cutAt, redelivered)
	if err := pause(ctx, h.cfg.AckWait); err != nil {
		return err
	}
	m.Redeliveries = h.results.count(func(e resultEntry) bool {
		return redelivered(e) && e.stored.After(cutAt) && e.stored.Before(backAt.Add(h.cfg.AckWait))
	})
	h.log("%s: first result %v after the reconnect; first redelivered prompt answered by %s %v after the cut",
		w.name, m.FirstResult.Round(time.Millisecond), other.name, m.Redelivered.Round(time.Millisecond))
	return nil
}

func (h *ClusterHarness) wipeNode(ctx context.Context, m *Wipe) error {
	if err := h.waitShare(ctx, h.cfg.WipeAt); err != nil {
		return err
	}
	// A follower: the leader's loss was the first fault.
	leader := h.leader(ctx)
	var n *clusterNode
	for i := len(h.nodes) - 1; i >= 0; i-- {
		if h.nodes[i].name != leader {
			n = h.nodes[i]
			break
		}
	}
	m.Node = n.name
	h.log("stopping %s (SIGTERM) and deleting its store; progress %s", n.name, h.progressNow())
	n.proc.terminate(30 * time.Second)
	if err := os.RemoveAll(n.store); err != nil {
		return err
	}
	if err := pause(ctx, h.cfg.WipeDown); err != nil {
		return err
	}
	if err := h.startNode(ctx, n, h.routes()); err != nil {
		return err
	}
	restarted := time.Now()
	current, err := h.waitCurrent(ctx, n.name, restarted)
	if err != nil {
		// What an operator does when a node does not catch up: drop it
		// from the streams' peers so that the leaders place and fill a
		// new replica.
		h.log("%v; removing the peer by hand", err)
		if m.PeerRemoved, err = h.peerRemove(ctx, n.name); err != nil {
			return err
		}
		if current, err = h.waitCurrent(ctx, n.name, restarted); err != nil {
			return err
		}
	}
	m.Current = current
	h.log("%s, rebuilt from an empty store, current on every replicated stream %v after its restart", n.name, current.Round(time.Millisecond))
	return nil
}

// peerRemove removes peer name from every replicated stream it is
// behind on ($JS.API.STREAM.PEER.REMOVE), as `nats stream cluster
// peer-remove` does.
func (h *ClusterHarness) peerRemove(ctx context.Context, name string) ([]string, error) {
	var done []string
	for _, s := range h.behind(ctx, name) {
		if strings.Contains(s, " ") {
			continue
		}
		msg, err := h.nc.RequestWithContext(ctx, "$JS.API.STREAM.PEER.REMOVE."+s, []byte(`{"peer":"`+name+`"}`))
		if err != nil {
			return done, fmt.Errorf("peer-remove %s from %s: %w", name, s, err)
		}
		h.log("peer-remove %s from %s: %s", name, s, msg.Data)
		done = append(done, s)
	}
	return done, nil
}

// resultEntry is one stored result of the run.
type resultEntry struct {
	worker   string
	attempts int
	stored   time.Time
}

// resultLog records every result of the run as it is stored, with the
// worker that published it and its delivery count.
type resultLog struct {
	mu      sync.Mutex
	entries []resultEntry
	cc      jetstream.ConsumeContext
}

func watchResults(ctx context.Context, js jetstream.JetStream, run string) (*resultLog, error) {
	c, err := js.OrderedConsumer(ctx, schema.ResultsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schema.RunFilter(schema.ResultsRoot, run)},
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", schema.ResultsStream, err)
	}
	l := &resultLog{}
	l.cc, err = c.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		r, err := schema.DecodeResult(m.Data())
		if err != nil {
			return
		}
		l.mu.Lock()
		l.entries = append(l.entries, resultEntry{worker: r.Worker, attempts: r.Attempts, stored: md.Timestamp})
		l.mu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", schema.ResultsStream, err)
	}
	return l, nil
}

func (l *resultLog) stop() {
	if l != nil && l.cc != nil {
		l.cc.Stop()
	}
}

// firstAfter returns how long after t the first result matching f was
// stored, or -1 when none was.
func (l *resultLog) firstAfter(t time.Time, f func(resultEntry) bool) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := time.Duration(-1)
	for _, e := range l.entries {
		if e.stored.After(t) && f(e) {
			if d := e.stored.Sub(t); first < 0 || d < first {
				first = d
			}
		}
	}
	return first
}

// count returns the number of results matching f.
func (l *resultLog) count(f func(resultEntry) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if f(e) {
			n++
		}
	}
	return n
}

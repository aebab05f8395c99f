package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// writePrompts runs gen-prompts (conversations of up to Turns user
// turns when Turns is above 1) and reads the prompts back as produce
// queues them.
func (h *Harness) writePrompts() ([]inputPrompt, error) {
	return h.genPrompts("gen-prompts", h.prompts, h.cfg.Prompts, h.cfg.Seed)
}

// genPrompts writes n prompts of seed to file and reads them back.
func (h *Harness) genPrompts(name, file string, n int, seed int64) ([]inputPrompt, error) {
	args := []string{"gen-prompts", "--count", strconv.Itoa(n),
		"--out", file, "--seed", strconv.FormatInt(seed, 10)}
	if h.cfg.turnsAll() {
		args = append(args, "--turns", strconv.Itoa(h.cfg.Turns))
	}
	if h.cfg.HiddenStates {
		args = append(args, "--task", "hidden-states", "--vocab-size", strconv.Itoa(vocabSize))
	}
	p, err := h.start(name, args...)
	if err != nil {
		return nil, err
	}
	if err := p.wait(2 * time.Minute); err != nil {
		return nil, fmt.Errorf("gen-prompts: %w\n%s", err, p.tail(20))
	}
	if h.cfg.HiddenStates {
		return readSamples(file)
	}
	input, err := readInput(file, h.cfg.turnsAll())
	return withSamples(input, h.cfg.Samples), err
}

func (h *Harness) produce() error {
	return h.produceRun("produce", h.cfg.Run, h.prompts, h.cfg.Prompts)
}

// produceRun produces run from file's n prompts.
func (h *Harness) produceRun(name, run, file string, n int) error {
	args := []string{"produce", "--nats", h.NATSURL(), "--run", run,
		"--prompts", file, "--model", Model, "--max-tokens", strconv.Itoa(h.cfg.MaxTokens),
		"--ack-wait", h.cfg.AckWait.String()}
	if h.cfg.MaxAttempts > 0 {
		args = append(args, "--max-attempts", strconv.Itoa(h.cfg.MaxAttempts))
	}
	if h.cfg.MaxDeliver > 0 {
		args = append(args, "--max-deliver", strconv.Itoa(h.cfg.MaxDeliver))
	}
	if h.cfg.turnsAll() {
		args = append(args, "--turns", "all")
	}
	if h.cfg.Samples > 1 {
		args = append(args, "--samples", strconv.Itoa(h.cfg.Samples))
	}
	if h.cfg.HiddenStates {
		args = append(args, "--task", "hidden-states", "--layer-ids", layerIDs, "--hidden-size", strconv.Itoa(h.cfg.HiddenSize))
	}
	p, err := h.start(name, args...)
	if err != nil {
		return err
	}
	if err := p.wait(5 * time.Minute); err != nil {
		return fmt.Errorf("produce %s: %w\n%s", run, err, p.tail(20))
	}
	if h.cfg.turnsAll() {
		h.log("produced %d conversations of 1 to %d user turns (--turns all) in run %s", n, h.cfg.Turns, run)
	} else {
		h.log("produced %d prompts in run %s", n, run)
	}
	return nil
}

// start runs an aerie command under a log name unique in this run
// ("w4", "nats-2", ...).
func (h *Harness) start(name string, args ...string) (*process, error) {
	p, err := startProcess(h.cfg.Bin, h.logs, name, args...)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	h.lastStart = time.Now()
	return p, nil
}

// next numbers the processes of a kind: "aggregator" gives aggregator-1,
// aggregator-2, ...
func (h *Harness) next(kind string) string {
	h.started[kind]++
	return fmt.Sprintf("%s-%d", kind, h.started[kind])
}

func (h *Harness) startServer(ctx context.Context) error {
	p, err := h.start(h.next("nats"), "server", "--listen", h.natsAddr, "--store", h.store)
	if err != nil {
		return err
	}
	h.server = p
	if err := waitTCP(ctx, h.natsAddr, p, 30*time.Second); err != nil {
		return fmt.Errorf("NATS server: %w\n%s", err, p.tail(20))
	}
	return nil
}

func (h *Harness) startSim(ctx context.Context) error {
	c := h.cfg
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	args := []string{"sim", "--listen", h.simAddr, "--speed", f(c.Speed),
		"--output-median", strconv.Itoa(c.OutputMedian), "--output-sigma", f(c.OutputSigma),
		"--max-num-seqs", strconv.Itoa(c.MaxNumSeqs), "--seed", strconv.FormatInt(c.Seed, 10),
		"--fault-400", f(c.Rate400), "--fault-429", f(c.Rate429), "--fault-500", f(c.Rate500), "--fault-503", f(c.Rate503),
		"--fault-hang", f(c.HangRate), "--fault-disconnect", f(c.DisconnectRate), "--fault-stream-error", f(c.StreamErrorRate),
		"--api-key", h.apiKey}
	if c.HiddenStates {
		if err := os.MkdirAll(h.simFiles(), 0o755); err != nil {
			return err
		}
		each := f(c.FileFaultRate / 4)
		args = append(args, "--hidden-states-path", h.simFiles(), "--hidden-layer-ids", layerIDs,
			"--hidden-size", strconv.Itoa(c.HiddenSize), "--vocab-size", strconv.Itoa(vocabSize),
			"--fault-hs-missing", each, "--fault-hs-cut", each, "--fault-hs-nan", each, "--fault-hs-other-tokens", each)
	}
	p, err := h.start("sim", args...)
	if err != nil {
		return err
	}
	h.sim = p
	if err := waitTCP(ctx, h.simAddr, p, 30*time.Second); err != nil {
		return fmt.Errorf("simulator: %w\n%s", err, p.tail(20))
	}
	return nil
}

// startWorker starts a worker with a new name and a window drawn from
// the configured range. It talks to the simulator through a listener of
// its own of the backend tap.
func (h *Harness) startWorker() error {
	h.started["w"]++
	name := fmt.Sprintf("w%d", h.started["w"])
	window := h.cfg.WindowMin + h.rng.IntN(h.cfg.WindowMax-h.cfg.WindowMin+1)
	backend, err := h.tap.listen(name)
	if err != nil {
		return err
	}
	runs := []string{"--run", h.cfg.Run}
	if h.cfg.Shared != "" {
		runs = []string{"--runs", h.cfg.Run + "," + h.cfg.Shared}
	}
	p, err := h.start(name, append(append([]string{"work", "--nats", h.NATSURL()}, runs...),
		"--backend", backend, "--window", strconv.Itoa(window), "--name", name,
		"--grace", "2s", "--first-token-timeout", h.cfg.StallTimeout.String(), "--idle-timeout", h.cfg.StallTimeout.String(),
		"--api-key-file", h.keyFile, "--data-dir", h.data)...)
	if err != nil {
		return err
	}
	h.workers = append(h.workers, p)
	h.log("started worker %s (pid %d, window %d)", name, p.pid(), window)
	return nil
}

func (h *Harness) startAggregator() error {
	name := h.next("aggregator")
	p, err := h.start(name, "aggregate", "--nats", h.NATSURL(), "--run", h.cfg.Run,
		"--data-dir", h.data, "--exit-when-done", "--event-interval", "1s")
	if err != nil {
		return err
	}
	h.aggregator = p
	h.log("started %s (pid %d)", name, p.pid())
	return nil
}

// startSecondAggregator starts an aggregator beside the running one, on
// the same data directory, waiting only a few seconds for the run: it
// must give up, naming the running one.
func (h *Harness) startSecondAggregator() error {
	name := h.next("aggregator-second")
	p, err := h.start(name, "aggregate", "--nats", h.NATSURL(), "--run", h.cfg.Run,
		"--data-dir", h.data, "--exit-when-done", "--event-interval", "1s", "--lease-wait", secondLeaseWait.String())
	if err != nil {
		return err
	}
	h.seconds = append(h.seconds, p)
	h.kills.SecondAggregators++
	h.log("started %s (pid %d) beside %s", name, p.pid(), h.aggregator.name)
	return nil
}

// secondLeaseWait is the --lease-wait of a second aggregator.
const secondLeaseWait = 3 * time.Second

func (h *Harness) log(format string, args ...any) {
	elapsed := time.Since(h.began).Seconds()
	h.logf("[%6.1fs] %s", elapsed, fmt.Sprintf(format, args...))
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitTCP polls addr until it accepts a connection, p exits, ctx ends or
// timeout passes.
func waitTCP(ctx context.Context, addr string, p *process, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%s not accepting connections after %v", addr, timeout)
		case <-p.done:
			return fmt.Errorf("%s exited: %s", p.name, p.exitStatus())
		case <-tick.C:
		}
	}
}

// A hidden-states run's samples have token ids below vocabSize and files
// of the layers layerIDs.
const (
	vocabSize = 1000
	layerIDs  = "2,30,58,61"
)

// simFiles is the directory the simulator writes its hidden-states
// files to.
func (h *Harness) simFiles() string { return filepath.Join(h.cfg.Dir, "sim-hidden-states") }

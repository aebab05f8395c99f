package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/worker"
)

// workers are the run's workers, each with its own connection.
type workers struct {
	all []*worker.Worker
	wg  sync.WaitGroup
	// stopped is closed once every worker has returned. Before the run
	// is done that means none is left to generate: each failed to start
	// (a worker returns early only then) or ctx ended.
	stopped chan struct{}

	mu     sync.Mutex
	failed []error // why workers stopped, in the order they did
}

// pullWait bounds the workers' pull requests. A stopping worker waits
// for its open pull to end rather than give it up, since prompts the
// server sends to a pull given up would wait out the consumer's ack wait
// before anyone got them; so at the end of a run the workers stop up to
// one pull wait after the last answer is written. A pull that finds
// fewer prompts than it asked for costs one request to the broker on
// this host, so a short wait costs next to nothing, while the default
// (worker.DefaultPullWait) would add up to seconds to every run.
const pullWait = 250 * time.Millisecond

// startWorkers starts cfg.Workers workers, each running until ctx ends.
// Every worker is made before any starts, so that a failure leaves none
// running.
func startWorkers(ctx context.Context, srv *broker.Server, cfg Config, client *openai.Client, reg prometheus.Registerer, log *slog.Logger) (*workers, error) {
	ws := &workers{stopped: make(chan struct{})}
	conns := make([]*nats.Conn, 0, cfg.Workers)
	for i := range cfg.Workers {
		nc, js, err := connect(srv, fmt.Sprintf("worker-%d", i+1))
		if err == nil {
			conns = append(conns, nc)
			var w *worker.Worker
			if w, err = worker.New(workerConfig(cfg, reg, log), js, client); err == nil {
				ws.all = append(ws.all, w)
			}
		}
		if err != nil {
			for _, nc := range conns {
				nc.Close()
			}
			return nil, err
		}
	}
	for i, w := range ws.all {
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			defer conns[i].Close()
			if err := w.Run(ctx); err != nil {
				log.Error("worker failed", "worker", w.Name(), "err", err)
				ws.mu.Lock()
				ws.failed = append(ws.failed, err)
				ws.mu.Unlock()
			}
		}()
	}
	go func() {
		ws.wg.Wait()
		close(ws.stopped)
	}()
	return ws, nil
}

// workerConfig is the configuration of each of cfg's workers: its own,
// for the run, with the pipeline's metrics registry and logger, a short
// pull wait unless it sets one, and, against the built-in simulator, the
// simulator's speed, so that a worker reads its load and hands back the
// tail as often, in the simulator's time, as against a real server.
func workerConfig(cfg Config, reg prometheus.Registerer, log *slog.Logger) worker.Config {
	wc := cfg.Worker
	wc.Run, wc.Runs, wc.AllRuns = cfg.Run, nil, false
	wc.Metrics, wc.Logger = reg, log
	wc.PullWait = cmp.Or(wc.PullWait, pullWait)
	wc.DataDir = cfg.DataDir
	if cfg.Backend == "" {
		wc.Speed = cfg.Sim.Speed
	}
	return wc
}

// wait waits until every worker has returned.
func (ws *workers) wait() { ws.wg.Wait() }

// err says why every worker stopped before the run was done.
func (ws *workers) err() error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.failed) == 0 {
		return fmt.Errorf("all %d workers stopped before the run was done", len(ws.all))
	}
	return fmt.Errorf("all %d workers stopped, so no prompt can be generated; %d failed, the first with: %w", len(ws.all), len(ws.failed), ws.failed[0])
}

// registerer is reg as a Registerer: nil (no metrics) when reg is nil,
// rather than a non-nil interface holding a nil registry.
func registerer(reg *prometheus.Registry) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return reg
}

// Package aggregator turns a run's results into
// <data-dir>/<run>/completions.jsonl (exactly one line per prompt, across
// crashes and redeliveries), its dead letters into failed.jsonl, and
// publishes throughput events.
package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// Output file names inside <data-dir>/<run>/.
const (
	CompletionsFile = "completions.jsonl"
	FailedFile      = "failed.jsonl"
	EventsFile      = "events.jsonl"
)

// Aggregator writes one run's output.
type Aggregator struct {
	cfg Config
	js  jetstream.JetStream
	nc  *nats.Conn
	log *slog.Logger
	dir string

	mu          sync.Mutex // guards the two files' id sets across loops
	completions *jsonlFile
	failed      *jsonlFile
	est         *throughput.Estimator
	events      *os.File

	total    int
	kick     chan struct{} // asks for an event now: the last prompt is in
	done     chan struct{}
	doneOnce sync.Once
	last     sync.Mutex
	snapshot schema.Throughput
	writeErr string                // guarded by last
	paused   map[string]pausedInfo // guarded by last
}

// pausedInfo is a worker's latest word that it is paused.
type pausedInfo struct {
	reason string
	at     time.Time
}

// setWriteError records why output cannot be written (nil: it can again),
// for the events.
func (a *Aggregator) setWriteError(err error) {
	a.last.Lock()
	defer a.last.Unlock()
	a.writeErr = ""
	if err != nil {
		a.writeErr = err.Error()
	}
}

// New returns an aggregator; js must be connected.
func New(cfg Config, js jetstream.JetStream) (*Aggregator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Aggregator{
		cfg: cfg, js: js, nc: js.Conn(),
		log:  cfg.Logger.With("run", cfg.Run, "component", "aggregator"),
		dir:  filepath.Join(cfg.DataDir, cfg.Run),
		done: make(chan struct{}),
		kick: make(chan struct{}, 1),
	}, nil
}

// Dir is the run's output directory.
func (a *Aggregator) Dir() string { return a.dir }

// Done is closed when every prompt of the run is completed or failed.
func (a *Aggregator) Done() <-chan struct{} { return a.done }

// Last returns the most recent throughput event.
func (a *Aggregator) Last() schema.Throughput {
	a.last.Lock()
	defer a.last.Unlock()
	return a.snapshot
}

// Run aggregates until ctx ends (or, with ExitWhenDone, until the run is
// done), then writes a last event and returns.
func (a *Aggregator) Run(ctx context.Context) error {
	m, err := provision.WaitManifest(ctx, a.js, a.cfg.Run, a.log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := a.open(m); err != nil {
		return err
	}
	defer a.close()

	results, err := provision.ResultsConsumer(ctx, a.js, a.cfg.Run)
	if err != nil {
		return fmt.Errorf("aggregator: %w", err)
	}
	dead, err := provision.DeadConsumer(ctx, a.js, a.cfg.Run)
	if err != nil {
		return fmt.Errorf("aggregator: %w", err)
	}
	advisories, err := provision.AdvisoriesConsumer(ctx, a.js, a.cfg.Run)
	if err != nil {
		return fmt.Errorf("aggregator: %w", err)
	}
	sub, err := a.nc.Subscribe(schema.HeartbeatFilter(a.cfg.Run), a.onHeartbeat)
	if err != nil {
		return fmt.Errorf("aggregator: subscribe to heartbeats: %w", err)
	}
	defer sub.Unsubscribe()

	a.log.Info("aggregating", "dir", a.dir, "total", m.Total,
		"completed_before", a.completions.count(), "failed_before", a.failed.count())

	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, l := range []struct {
		cons  jetstream.Consumer
		write func([]jetstream.Msg) error
	}{{results, a.writeResults}, {dead, a.writeDeadLetters}, {advisories, a.writeAdvisories}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.consume(loopCtx, l.cons, l.write); err != nil {
				errs <- err
				stop()
			}
		}()
	}

	a.emit(time.Now())
	t := time.NewTicker(a.cfg.EventInterval)
	defer t.Stop()
	var runErr error
	done := a.done
loop:
	for {
		select {
		case <-loopCtx.Done():
			break loop
		case <-done:
			if a.cfg.ExitWhenDone {
				break loop
			}
			done = nil // keep running; stop selecting on it
		case now := <-t.C:
			a.emit(now)
		case <-a.kick:
			a.emit(time.Now())
		}
	}
	stop()
	wg.Wait()
	select {
	case runErr = <-errs:
	default:
	}
	a.emit(time.Now())
	return runErr
}

// open creates the run directory and opens the three files, restoring
// counts from what is already written.
func (a *Aggregator) open(m *schema.Manifest) error {
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return fmt.Errorf("aggregator: create %s: %w (is --data-dir writable?)", a.dir, err)
	}
	a.total = m.Total
	a.est = throughput.New(throughput.Config{Run: a.cfg.Run, Total: m.Total}, time.Now())
	var err error
	a.completions, err = openJSONL(filepath.Join(a.dir, CompletionsFile), func(line []byte) error {
		var l struct {
			FinishReason string `json:"finish_reason"`
			Usage        usage  `json:"usage"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return err
		}
		a.est.Restore(l.Usage.CompletionTokens, l.FinishReason == "length")
		return nil
	})
	if err != nil {
		return fmt.Errorf("aggregator: %w", err)
	}
	a.failed, err = openJSONL(filepath.Join(a.dir, FailedFile), func([]byte) error {
		a.est.RestoreFailed()
		return nil
	})
	if err != nil {
		a.completions.Close()
		return fmt.Errorf("aggregator: %w", err)
	}
	a.events, err = os.OpenFile(filepath.Join(a.dir, EventsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		a.completions.Close()
		a.failed.Close()
		return fmt.Errorf("aggregator: open events file: %w", err)
	}
	return nil
}

func (a *Aggregator) close() {
	a.completions.Close()
	a.failed.Close()
	a.events.Close()
}

func (a *Aggregator) onHeartbeat(m *nats.Msg) {
	var hb schema.Heartbeat
	if err := json.Unmarshal(m.Data, &hb); err != nil {
		a.log.Warn("ignoring undecodable heartbeat", "subject", m.Subject, "err", err)
		return
	}
	a.est.Heartbeat(hb)
	a.last.Lock()
	defer a.last.Unlock()
	if a.paused == nil {
		a.paused = map[string]pausedInfo{}
	}
	if hb.Paused {
		a.paused[hb.Worker] = pausedInfo{reason: hb.PausedReason, at: hb.Time}
	} else {
		delete(a.paused, hb.Worker)
	}
}

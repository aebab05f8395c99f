// Package aggregator turns a run's results into
// <data-dir>/<run>/completions.jsonl (exactly one line per unit of work,
// a prompt id and a sample, across crashes and redeliveries), its dead
// letters into failed.jsonl, and publishes throughput events.
package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// Output file names inside <data-dir>/<run>/.
const (
	CompletionsFile = dataset.CompletionsFile
	FailedFile      = dataset.FailedFile
	EventsFile      = dataset.EventsFile
	ManifestFile    = dataset.ManifestFile
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
	failed      *failedFile
	est         *throughput.Estimator
	events      *os.File

	total int
	// turnsAll is set for runs that regenerate every turn (--turns all):
	// a line is then a conversation of several requests.
	turnsAll bool
	kick     chan struct{} // asks for an event now: the last prompt is in
	done     chan struct{}
	doneOnce sync.Once
	// owner is this aggregator's right to write the run's files.
	owner *owner
	// complete is when the run was last found complete (see confirmDone);
	// used by the event loop only.
	complete time.Time
	// unwritten looks for lines nothing will bring (see unwritten.go);
	// used by the event loop only.
	unwritten unwritten
	// ackWaitKnown is set once the estimator has the workers consumer's
	// AckWait (see learnAckWait); used by the event loop only.
	ackWaitKnown bool
	last         sync.Mutex
	snapshot     schema.Throughput
	writeErr     string // guarded by last
	// needs is the run's (schema.Manifest.Needs), set by Run before it
	// consumes: the dead letters the aggregator stores name them.
	needs []string
	// lacks is set, once, when a result or dead letter needs a feature
	// this build lacks: nothing more is written (see fitting).
	lacks atomic.Pointer[schema.LackError]
	// needsOK checks each message\'s features (schema.HeaderNeeds).
	needsOK schema.NeedsCache
	paused  map[string]pausedInfo // guarded by last
	// starved counts the snapshots in a row that found the run waiting
	// for slots (see slots.go); guarded by last. sched is the run's
	// schedule, followed from its manifest.
	starved int
	sched   atomic.Pointer[schema.Schedule]
	// queuedSeen is the run's prompts waiting to be delivered, as the
	// event loop last read them while no worker held any (see tick): a
	// run with none queued is not waiting for slots. -1 when not read.
	queuedSeen atomic.Int64
	// metrics is nil without Config.Metrics.
	metrics *metrics
	// fetchWait bounds one fetch (see the constant; tests lengthen it).
	fetchWait time.Duration
	// finished ends the open fetches when the aggregator stops once the
	// run is done: see consume.
	finished context.Context
	finish   context.CancelFunc
	// manifest is the run's, set by Run before it consumes.
	manifest atomic.Pointer[schema.Manifest]
	// bytesPerToken and bytesTotal are a hidden-states run's: what a
	// token takes in its file, and the run's files in all; zero for
	// other runs.
	bytesPerToken, bytesTotal int64
	// tokensTotal is a hidden-states run's input tokens, and pace its
	// progress through them (see extractionETA); used by the event loop.
	tokensTotal int64
	pace        tokenPace
	// datasetFor is the completions and failures a hidden-states run's
	// dataset was last written for (see finishOutput); used by the event
	// loop only.
	datasetFor [2]int
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
	a := &Aggregator{
		cfg: cfg, js: js, nc: js.Conn(),
		log:  cfg.Logger.With("run", cfg.Run, "component", "aggregator"),
		dir:  filepath.Join(cfg.DataDir, cfg.Run),
		done: make(chan struct{}),
		kick: make(chan struct{}, 1),

		fetchWait: fetchWait,
	}
	a.finished, a.finish = context.WithCancel(context.Background())
	a.queuedSeen.Store(-1)
	if cfg.Metrics != nil {
		if err := a.registerMetrics(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Dir is the run's output directory.
func (a *Aggregator) Dir() string { return a.dir }

// Done is closed when every unit of the run (prompt and sample) is
// completed or failed.
func (a *Aggregator) Done() <-chan struct{} { return a.done }

// Last returns the most recent throughput event.
func (a *Aggregator) Last() schema.Throughput {
	a.last.Lock()
	defer a.last.Unlock()
	return a.snapshot
}

// Run aggregates until ctx ends (or, with ExitWhenDone, until the run is
// done), then writes a last event and returns. It first takes the sole
// right to write the run's files (see owner), waiting up to
// Config.LeaseWait for another aggregator to let go of it; it returns a
// *HeldError if that one does not, or at once, with ExitWhenDone, a
// *FinishedError when the run it holds is done. It returns an error, too, if it loses
// that right while running. A ctx that ends while it is still starting
// makes it return nil, as one that ends later does: a stop asked for is
// not a failure.
func (a *Aggregator) Run(ctx context.Context) error {
	m, err := provision.WaitManifest(ctx, a.js, a.cfg.Run, a.log)
	if err == nil {
		if lack := schema.LackOf(m); lack != nil {
			m, err = a.waitServable(ctx, m, lack)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	a.needs = m.Needs
	a.manifest.Store(m)
	if err := os.MkdirAll(a.dir, fsmode.Dir); err != nil {
		return fmt.Errorf("aggregator: create %s: %w (is --data-dir writable?)", a.dir, err)
	}
	var finished func(context.Context, string) error
	if a.cfg.ExitWhenDone {
		// Nothing to wait for: the run another aggregator holds is done.
		finished = func(ctx context.Context, holder string) error {
			ev, err := runs.Done(ctx, a.js, a.cfg.Run)
			if err != nil || ev == nil {
				return nil
			}
			return &FinishedError{Run: a.cfg.Run, Holder: holder, Completed: ev.Completed, Failed: ev.Failed, Total: ev.Total}
		}
	}
	if a.owner, err = own(ctx, a.js, a.cfg.Run, a.dir, a.cfg.LeaseWait, finished, a.log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer a.owner.release()
	if err := a.open(m); err != nil {
		return err
	}
	defer a.close()
	sc := m.Schedule
	a.sched.Store(&sc)
	if err := writeManifest(a.dir, m); err != nil {
		a.log.Warn("cannot write the run's manifest beside its output; aerie report will not show its parameters", "err", err)
	}

	// startErr is what Run returns for err met while starting: nil when
	// ctx has ended, for then err is most likely ctx's own.
	startErr := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("aggregator: %w", err)
	}
	results, err := provision.ResultsConsumer(ctx, a.js, a.cfg.Run)
	if err != nil {
		return startErr(err)
	}
	dead, err := provision.DeadConsumer(ctx, a.js, a.cfg.Run)
	if err != nil {
		return startErr(err)
	}
	advisories, err := provision.AdvisoriesConsumer(ctx, a.js, a.cfg.Run)
	if err != nil {
		return startErr(err)
	}
	sub, err := a.nc.Subscribe(schema.HeartbeatFilter(a.cfg.Run), a.onHeartbeat)
	if err != nil {
		return startErr(fmt.Errorf("subscribe to heartbeats: %w", err))
	}
	defer sub.Unsubscribe()
	if err := a.refresh(ctx); err != nil && ctx.Err() == nil {
		a.log.Warn("cannot compare failed.jsonl with the dead letters yet; trying again later", "err", err)
	}

	a.log.Info("aggregating", "dir", a.dir, "total", m.Total,
		"completed_before", a.completions.count(), "failed_before", a.failed.count())

	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.followSchedule(loopCtx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.owner.keep(loopCtx); err != nil {
			a.log.Error(err.Error())
			errs <- err
			stop()
		}
	}()

	a.tick(ctx, time.Now())
	t := time.NewTicker(a.cfg.EventInterval)
	defer t.Stop()
	refresh := time.NewTicker(a.cfg.RefreshInterval)
	defer refresh.Stop()
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
			a.tick(loopCtx, now)
		case <-a.kick:
			a.tick(loopCtx, time.Now())
		case <-refresh.C:
			if err := a.refresh(loopCtx); err != nil && loopCtx.Err() == nil {
				a.log.Warn("cannot compare failed.jsonl with the dead letters; trying again later", "err", err)
			}
		}
	}
	select {
	case <-a.done:
		// Whatever an open fetch may still bring is a second answer to a
		// unit already written: see consume.
		a.finish()
	default:
	}
	stop()
	wg.Wait()
	select {
	case runErr = <-errs:
	default:
	}
	a.emit(a.snapshotNow(time.Now()))
	return runErr
}

// open opens the run's three files, restoring counts from what is
// already written. A unit found in both completions.jsonl and
// failed.jsonl (a crash between writing its completion and removing its
// failure) keeps its completion: its failed line goes.
func (a *Aggregator) open(m *schema.Manifest) error {
	a.total = m.Total
	a.turnsAll = m.TurnsMode() == schema.TurnsAll
	if x := m.Extraction; x != nil {
		a.bytesPerToken, a.bytesTotal, a.tokensTotal = x.BytesPerToken(), x.Bytes(), x.Tokens
	}
	a.est = throughput.New(throughput.Config{
		Run: a.cfg.Run, Total: m.Total, Requests: m.Requests(), ReportTurns: a.turnsAll,
		MaxTokens: m.MaxAnswerTokens(),
	}, time.Now())
	var err error
	a.completions, err = openCompletions(filepath.Join(a.dir, CompletionsFile), m.Total, func(s *lineindex.Summary) {
		a.est.Restore(a.observed(a.answerOf(s)))
	}, a.log)
	if err != nil {
		return fmt.Errorf("aggregator: %w", err)
	}
	a.failed, err = openFailed(filepath.Join(a.dir, FailedFile), func(l failedHead) int {
		n := failedRequests(l.Messages, a.turnsAll)
		a.est.RestoreFailed(n)
		return n
	})
	if err != nil {
		a.completions.Close()
		return fmt.Errorf("aggregator: %w", err)
	}
	for key := range a.failed.failedAt {
		done, err := a.completions.has(key)
		if err != nil {
			a.completions.Close()
			a.failed.Close()
			return fmt.Errorf("aggregator: %w", err)
		}
		if done {
			a.est.Reopened(a.failed.markCompleted(key))
		}
	}
	if n := len(a.failed.completed); n > 0 {
		if err := a.failed.flush(); err != nil {
			a.log.Error("cannot remove completed prompts from failed.jsonl; they do not count as failed", "err", err)
		} else {
			a.log.Warn("removed from failed.jsonl units that also have a completion (an earlier aggregator stopped between the two writes)", "units", n)
		}
	}
	a.events, err = os.OpenFile(filepath.Join(a.dir, EventsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, fsmode.File)
	if err != nil {
		a.completions.Close()
		a.failed.Close()
		return fmt.Errorf("aggregator: open events file: %w", err)
	}
	return nil
}

func (a *Aggregator) close() {
	a.mu.Lock()
	if err := a.failed.flush(); err != nil {
		a.log.Error("cannot remove completed prompts from failed.jsonl; the next start does", "err", err)
	}
	a.mu.Unlock()
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
	if a.cfg.Observer != nil {
		a.cfg.Observer.Heartbeat(hb)
	}
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

// observed shows a line's answer to the Observer, if any, and returns it.
func (a *Aggregator) observed(ans throughput.Answer) throughput.Answer {
	if a.cfg.Observer != nil {
		a.cfg.Observer.Answer(ans)
	}
	return ans
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/hscheck"
	"github.com/aerie-dev/aerie/schema"
)

// ErrStalled is returned by Run when the aggregator has not finished the
// run within Config.Timeout, or the run is stuck (see Config.StuckAfter).
var ErrStalled = errors.New("chaos: the run did not finish in time")

// Harness does one chaos run. Close it when done, whatever Run returned:
// it kills every process the harness started.
type Harness struct {
	cfg  Config
	rng  *rand.Rand
	logf func(format string, args ...any)

	logs, data, store, prompts string
	natsAddr, simAddr          string
	began                      time.Time
	// apiKey is the simulator's API key; keyFile is the workers'
	// --api-key-file, which holds it except during a rotation.
	apiKey, keyFile string

	mu    sync.Mutex
	procs []*process // every process started, for Close
	nc    *nats.Conn // the harness's own connection, for the stuck check

	// tap stands between the workers and the simulator; turns and
	// results record when each turn and answer was stored (turns only
	// with --turns all). All three are set by setUp.
	tap            *backendTap
	turns, results *storeWatch

	// Owned by Run's goroutine.
	js         jetstream.JetStream
	server     *process
	sim        *process
	aggregator *process
	// sharedAggregator writes the shared run (Config.Shared), and
	// sharedInput is its input.
	sharedAggregator *process
	sharedInput      []inputPrompt
	workers          []*process // running workers
	seconds          []*process // second aggregators, which must give up
	// keyDue, when set, is when the workers' key file gets the
	// simulator's new key: a rotation is under way until then.
	keyDue     time.Time
	started    map[string]int
	lastStart  time.Time // when the latest process was started
	kills      Kills
	unexpected []string
	progress   progress
}

// Kills counts what the harness broke, and the replays it ran.
type Kills struct {
	Workers, Aggregators, NATS int
	Replays                    int
	// SecondAggregators counts aggregators started beside the running
	// one, Refused those that gave up as they must; KeyRotations the
	// simulator's key changes.
	SecondAggregators, Refused int
	KeyRotations               int
	// ScheduleChanges counts the changes of the shared run's schedule.
	ScheduleChanges int
	// ReplayedAfterDone counts prompts replayed once the run was done;
	// ReplayedAfterStoredTurns, with --turns all, the conversations among
	// them that had failed at their second turn or later, whose replay
	// goes on after the turns stored before.
	ReplayedAfterDone, ReplayedAfterStoredTurns int
}

// New prepares a run in cfg.Dir; it starts nothing.
func New(cfg Config) (*Harness, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Harness{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6368616f73)),
		logf:    cfg.Logf,
		logs:    filepath.Join(cfg.Dir, "logs"),
		data:    filepath.Join(cfg.Dir, "data"),
		store:   filepath.Join(cfg.Dir, "nats"),
		prompts: filepath.Join(cfg.Dir, "prompts.jsonl"),
		keyFile: filepath.Join(cfg.Dir, "api-key"),
		apiKey:  "chaos-key-1",
		started: map[string]int{},
	}
	if h.logf == nil {
		h.logf = func(string, ...any) {}
	}
	for _, d := range []string{h.logs, h.data, h.store} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(h.keyFile, []byte(h.apiKey+"\n"), 0o600); err != nil {
		return nil, err
	}
	out := filepath.Join(h.data, cfg.Run)
	h.progress = progress{
		total:       cfg.Prompts * max(cfg.Samples, 1), // output lines: one per sample
		completions: newLineCounter(filepath.Join(out, aggregator.CompletionsFile)),
		failed:      newLineCounter(filepath.Join(out, aggregator.FailedFile)),
	}
	return h, nil
}

// Dir is the work directory: prompts.jsonl, data/<run>/, nats/, logs/.
func (h *Harness) Dir() string { return h.cfg.Dir }

// NATSURL is the NATS server's client URL, once Run has chosen a port.
func (h *Harness) NATSURL() string { return "nats://" + h.natsAddr }

// Close kills, by PID, every process the harness started that is still
// running. It may be called more than once.
func (h *Harness) Close() {
	h.mu.Lock()
	procs := append([]*process(nil), h.procs...)
	nc, tap := h.nc, h.tap
	turns, results := h.turns, h.results
	h.turns, h.results = nil, nil
	h.mu.Unlock()
	turns.stop()
	results.stop()
	if nc != nil {
		nc.Close()
	}
	for _, p := range procs {
		if !p.exited() {
			p.kill()
		}
	}
	if tap != nil {
		tap.close()
	}
}

// Run does the whole run: writes the prompts, starts the server, the
// simulator, the workers and the aggregator, produces, breaks things on
// schedule until the aggregator finishes (it runs with --exit-when-done),
// and checks the output. The Report is filled in as far as the run got,
// also when Run returns an error; ErrStalled means the aggregator did not
// finish, and the Report then holds the NATS state.
func (h *Harness) Run(ctx context.Context) (*Report, error) {
	h.began = time.Now()
	rep := &Report{Config: h.cfg}
	defer func() {
		rep.Kills = h.kills
		rep.Unexpected = h.unexpected
		if rep.Wall == 0 {
			rep.Wall = time.Since(h.began)
		}
	}()
	input, err := h.setUp(ctx)
	if err != nil {
		return rep, err
	}
	sharedInput, err := h.setUpShared()
	if err != nil {
		return rep, err
	}
	runErr := h.conduct(ctx)
	if runErr == nil {
		// A key rotated just before the end is followed by the
		// workers' key file still: they serve the replay and the
		// shared run after it.
		runErr = h.finishRotation(ctx)
	}
	if runErr == nil {
		runErr = h.finishShared(ctx, h.cfg.Timeout)
	}
	if runErr == nil && h.cfg.ReplayAfterDone {
		runErr = h.replayAfterDone(ctx)
	}
	rep.Wall = time.Since(h.began)
	rep.Faults = simFaults(h.simAddr)
	if err := h.check(ctx, rep, input, runErr == nil); err != nil {
		return rep, errors.Join(runErr, err)
	}
	if err := h.checkShared(rep, sharedInput); err != nil {
		return rep, errors.Join(runErr, err)
	}
	return rep, runErr
}

// setUp writes the prompts, starts the server, the simulator, the
// workers and the aggregator, produces, and starts watching the stored
// turns and answers. It returns the input as produce queues it.
func (h *Harness) setUp(ctx context.Context) ([]inputPrompt, error) {
	input, err := h.writePrompts()
	if err != nil {
		return nil, err
	}
	if h.natsAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if h.simAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if err := h.startServer(ctx); err != nil {
		return nil, err
	}
	if err := h.startSim(ctx); err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.tap = newBackendTap(h.simAddr)
	h.mu.Unlock()
	nc, err := nats.Connect(h.NATSURL(), nats.Name("aerie-chaos"), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.nc = nc
	h.mu.Unlock()
	if h.js, err = jetstream.New(nc); err != nil {
		return nil, err
	}
	for range h.cfg.Workers {
		if err := h.startWorker(); err != nil {
			return nil, err
		}
	}
	if err := h.startAggregator(); err != nil {
		return nil, err
	}
	if err := h.produce(); err != nil {
		return nil, err
	}
	return input, h.watch(ctx)
}

// watch starts recording when the run's answers, and with --turns all
// its turns, are stored. produce has created the streams.
func (h *Harness) watch(ctx context.Context) error {
	results, err := watchStores(ctx, h.js, schema.ResultsStream, schema.RunFilter(schema.ResultsRoot, h.cfg.Run))
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.results = results
	h.mu.Unlock()
	if !h.cfg.turnsAll() {
		return nil
	}
	turns, err := watchStores(ctx, h.js, schema.TurnsStream, schema.RunFilter(schema.TurnsRoot, h.cfg.Run))
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.turns = turns
	h.mu.Unlock()
	return nil
}

// check reads the output files into rep.Outcome. When the run finished
// it also checks that every failed prompt kept its dead letter, that
// every stored answer was written, that no request asked for a turn
// already stored and, with --turns all, that no completed conversation
// left stored turns behind; when anything is wrong it adds the NATS
// state to the report.
func (h *Harness) check(ctx context.Context, rep *Report, input []inputPrompt, finished bool) error {
	out := filepath.Join(h.data, h.cfg.Run)
	o, err := verify(input, h.cfg.turnsAll(), filepath.Join(out, aggregator.CompletionsFile), filepath.Join(out, aggregator.FailedFile))
	if err != nil {
		return err
	}
	ids := inputIDs(input)
	rep.Outcome = o
	rep.Races = raceReports(h.logs)
	if finished {
		un, checked, err := unreplayable(ctx, h.NATSURL(), h.cfg.Run, o.failedIDs, time.Minute)
		switch {
		case err != nil:
			h.log("cannot check that failed prompts keep their dead letters: %v", err)
		case !checked:
			h.log("workers still busy a minute after the aggregator finished: not checking that failed prompts keep their dead letters")
		default:
			o.Unreplayable = un
			rep.DeadLettersChecked = true
		}
		if ids, err := answeredNotWritten(ctx, h.NATSURL(), h.cfg.Run, ids, o.completed); err != nil {
			h.log("cannot check that every stored answer was written: %v", err)
		} else {
			o.AnsweredNotWritten = ids
		}
		if h.cfg.turnsAll() {
			left, kept, err := leftoverTurns(ctx, h.NATSURL(), h.cfg.Run, tokens(input), o.completed, toSet(o.failedIDs), 30*time.Second)
			if err != nil {
				h.log("cannot check that completed conversations left no stored turns: %v", err)
			} else {
				o.LeftoverTurns, o.KeptTurns = left, kept
				rep.TurnsStoreChecked = true
			}
		}
		rep.Requests = h.checkRequests(ctx, input)
		if h.cfg.HiddenStates {
			h.checkHiddenStates(rep, out)
		}
	}
	if h.cfg.turnsAll() {
		rep.ConcurrentTurns = concurrentTurns(h.logs)
	}
	if !finished || !o.OK() || (rep.Requests != nil && len(rep.Requests.Regenerated) > 0) {
		traced := append(append(append([]string(nil), o.Missing...), o.InBoth...), o.Unknown...)
		traced = append(traced, o.AnsweredNotWritten...)
		for _, l := range o.LeftoverTurns {
			id, _, _ := strings.Cut(l, ":")
			traced = append(traced, id)
		}
		if rep.Requests != nil {
			for _, r := range rep.Requests.Regenerated {
				id, _, _ := strings.Cut(r, " ")
				traced = append(traced, id)
			}
		}
		traced = append(traced, o.Unreplayable...)
		rep.State = natsState(h.NATSURL(), h.cfg.Run, traced)
		if len(traced) > maxTraced {
			traced = traced[:maxTraced]
		}
		rep.State += logsNaming(h.logs, traced)
		if !finished {
			for _, w := range h.workers {
				if w.exited() {
					continue
				}
				rep.State += fmt.Sprintf("last lines of %s:\n%s\n", w.name, w.tail(8))
			}
		}
	}
	return nil
}

// checkRequests judges the requests the workers sent against the times
// the turns and answers were stored (see checkRequests); nil when the
// store times could not all be read.
func (h *Harness) checkRequests(ctx context.Context, input []inputPrompt) *RequestCheck {
	h.mu.Lock()
	turns, results := h.turns, h.results
	h.mu.Unlock()
	for _, w := range []*storeWatch{turns, results} {
		if w != nil && !w.catchUp(ctx, 30*time.Second) {
			h.log("cannot check the requests sent for stored turns: the stored turns and answers could not all be read")
			return nil
		}
	}
	byToken := tokens(input)
	turnStored := map[turnRef]time.Time{}
	if turns != nil {
		for subject, t := range turns.times() {
			if ref, ok := turnOfSubject(subject, h.cfg.Run, byToken); ok {
				turnStored[ref] = t
			}
		}
	}
	resultStored := map[string]time.Time{}
	if results != nil {
		for subject, t := range results.times() {
			if id, ok := resultOfSubject(subject, h.cfg.Run, byToken); ok {
				resultStored[id] = t
			}
		}
	}
	reqs, chats := h.tap.snapshot()
	// The shared run's prompts are indexed too, under ids of their own:
	// a request whose messages both runs have is then ambiguous, not
	// taken for the first run's.
	all := input
	for _, p := range h.sharedInput {
		p.ID = sharedRef + p.ID
		all = append(all, p)
	}
	c := checkRequests(reqs, chats, newRequestIndex(all, h.cfg.turnsAll()), turnStored, resultStored)
	return &c
}

// toSet makes a set of a list.
func toSet(items []string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, s := range items {
		m[s] = true
	}
	return m
}

// describe lists processes for a log line.
func describe(ps []*process) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.name
	}
	return strings.Join(names, " ")
}

// checkHiddenStates reads a hidden-states run's output as its trainer
// will (hscheck) into rep, and counts the files the simulator's
// directory still holds.
func (h *Harness) checkHiddenStates(rep *Report, out string) {
	b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err == nil {
		var m *schema.Manifest
		if m, err = schema.DecodeManifest(b); err == nil {
			rep.HiddenStates, err = hscheck.Check(m, out, filepath.Join(out, aggregator.CompletionsFile), filepath.Join(out, aggregator.FailedFile))
		}
	}
	if err != nil {
		h.log("cannot check the hidden-states output: %v", err)
		return
	}
	entries, _ := os.ReadDir(h.simFiles())
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".safetensors" {
			rep.ServerFilesLeft++
		}
	}
}

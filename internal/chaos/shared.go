package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
)

// A shared run (Config.Shared) is a second run served by the same
// workers: they run `aerie work --runs Run,Shared`, and its schedule
// changes while both run, so that slots move between the runs under the
// kills and faults of the first.

// sharedSchedules are the schedule changes made in turn at each share
// of Config.ScheduleChangesAt: the shared run above the first, below
// it, then equal with three times its weight.
var sharedSchedules = [][]string{
	{"--priority", "5", "--weight", "1"},
	{"--priority", "-5"},
	{"--priority", "0", "--weight", "3"},
}

// setUpShared writes the shared run's prompts (another seed), produces
// it and starts its aggregator. It returns its input.
func (h *Harness) setUpShared() ([]inputPrompt, error) {
	if h.cfg.Shared == "" {
		return nil, nil
	}
	file := filepath.Join(h.cfg.Dir, "prompts-shared.jsonl")
	input, err := h.genPrompts("gen-prompts-shared", file, h.cfg.SharedPrompts, h.cfg.Seed+1)
	if err != nil {
		return nil, err
	}
	if err := h.produceRun("produce-shared", h.cfg.Shared, file, h.cfg.SharedPrompts); err != nil {
		return nil, err
	}
	h.sharedInput = input
	return input, h.startSharedAggregator()
}

// sharedRef prefixes the shared run's ids in the request index, where
// both runs' prompts are (see checkRequests).
const sharedRef = "shared run: "

func (h *Harness) startSharedAggregator() error {
	name := h.next("aggregator-shared")
	p, err := h.start(name, "aggregate", "--nats", h.NATSURL(), "--run", h.cfg.Shared,
		"--data-dir", h.data, "--exit-when-done", "--event-interval", "1s")
	if err != nil {
		return err
	}
	h.sharedAggregator = p
	h.log("started %s (pid %d) for run %s", name, p.pid(), h.cfg.Shared)
	return nil
}

// superviseShared replaces the shared run's aggregator when it exited
// on its own; one that finished is left so.
func (h *Harness) superviseShared() error {
	a := h.sharedAggregator
	if a == nil || !a.exited() || a.err == nil {
		return nil
	}
	if bad, how := a.unexpectedExit(); bad {
		h.noteUnexpected(a, how)
		return h.startSharedAggregator()
	}
	return nil
}

// changeSchedule makes the next change of the shared run's schedule.
func (h *Harness) changeSchedule() error {
	change := sharedSchedules[h.kills.ScheduleChanges%len(sharedSchedules)]
	p, err := h.start(h.next("runs-set"), append([]string{"runs", "set", h.cfg.Shared, "--nats", h.NATSURL()}, change...)...)
	if err != nil {
		return err
	}
	if err := p.wait(time.Minute); err != nil {
		return fmt.Errorf("runs set %s: %w\n%s", h.cfg.Shared, err, p.tail(10))
	}
	h.kills.ScheduleChanges++
	h.log("run %s: schedule %v at %s", h.cfg.Shared, change, &h.progress)
	return nil
}

// finishShared waits, once the first run is done, for the shared run's
// aggregator to finish it, replacing it if it dies on its own.
func (h *Harness) finishShared(ctx context.Context, timeout time.Duration) error {
	if h.sharedAggregator == nil {
		return nil
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		a := h.sharedAggregator
		if a.exited() && a.err == nil {
			h.log("%s finished run %s", a.name, h.cfg.Shared)
			return nil
		}
		if err := h.superviseShared(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			h.log("run %s not finished %v after the first: giving up", h.cfg.Shared, timeout)
			return ErrStalled
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// checkShared verifies the shared run's output files.
func (h *Harness) checkShared(rep *Report, input []inputPrompt) error {
	if h.cfg.Shared == "" {
		return nil
	}
	out := filepath.Join(h.data, h.cfg.Shared)
	o, err := verify(input, h.cfg.turnsAll(), filepath.Join(out, aggregator.CompletionsFile), filepath.Join(out, aggregator.FailedFile))
	if err != nil {
		return fmt.Errorf("check run %s: %w", h.cfg.Shared, err)
	}
	rep.SharedOutcome = o
	if !o.OK() {
		rep.State += natsState(h.NATSURL(), h.cfg.Shared, append(append(append([]string(nil), o.Missing...), o.InBoth...), o.Unknown...))
	}
	return nil
}

// sharedLine describes the shared run for the report.
func sharedLine(c Config) string {
	return c.Shared + ": " + strconv.Itoa(c.SharedPrompts) + " prompts served by the same workers, its schedule changed in turn to " + fmt.Sprint(sharedSchedules)
}

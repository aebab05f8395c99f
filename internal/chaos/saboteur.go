package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// conduct breaks things on schedule until the aggregator exits 0 (it runs
// with --exit-when-done, so that is the end of the run), Config.Timeout
// passes or the run is stuck (ErrStalled), or ctx ends. Everything
// happens on this goroutine, one action at a time, so a kill never
// overlaps a restart.
//
//   - Workers: every WorkerKillEvery (jittered), while progress is in
//     [KillFrom, KillUntil) and fewer than WorkerKills were killed, one
//     worker chosen at random is killed with SIGKILL and a new one, with a
//     new name, started.
//   - Aggregator: at each share of AggregatorKillsAt, and every
//     AggregatorKillEvery if set, SIGKILL, then a new one.
//   - NATS: at each share of NATSRestartsAt, SIGKILL or SIGTERM, NATSDown
//     of silence, then a new server on the same port and store.
//   - Replay: at each share of ReplaysAt, `aerie replay` of every dead
//     letter, waited for.
//   - A second aggregator: at each share of SecondAggregatorsAt, one more
//     beside the running one; it must give up and write nothing.
//   - Key rotation: at each share of KeyRotationsAt, the simulator's API
//     key changes; the workers' key file follows KeyFileLag later, and no
//     worker is killed (and so started with the old key) meanwhile.
//
// A process that exits without being asked is noted in the report and
// replaced, so one crash does not end the run.
func (h *Harness) conduct(ctx context.Context) error {
	c := h.cfg
	deadline := time.NewTimer(c.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	status := time.NewTicker(10 * time.Second)
	defer status.Stop()
	workerKills := h.every(c.WorkerKillEvery)
	defer workerKills.stop()
	aggregatorKills := h.every(c.AggregatorKillEvery)
	defer aggregatorKills.stop()
	stuck := stuckCheck{after: c.StuckAfter, lines: -1, since: time.Now()}
	aggAt := slices.Sorted(slices.Values(c.AggregatorKillsAt))
	natsAt := slices.Sorted(slices.Values(c.NATSRestartsAt))
	replayAt := slices.Sorted(slices.Values(c.ReplaysAt))
	secondAt := slices.Sorted(slices.Values(c.SecondAggregatorsAt))
	rotateAt := slices.Sorted(slices.Values(c.KeyRotationsAt))
	scheduleAt := slices.Sorted(slices.Values(c.ScheduleChangesAt))

	for {
		var err error
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			h.log("no end after %v: %s written; giving up", c.Timeout, &h.progress)
			return ErrStalled
		case <-status.C:
			h.log("progress %s, workers %s, %s", &h.progress, describe(h.workers), h.aggregator.name)
			if stuck.is(ctx, h) {
				return ErrStalled
			}
		case <-workerKills.c:
			more := func() bool { return c.WorkerKills == 0 || h.kills.Workers < c.WorkerKills }
			if h.killing() && more() && h.keyDue.IsZero() {
				err = h.killWorker()
			}
			workerKills.again(h, more() && h.progress.share() < c.KillUntil)
		case <-aggregatorKills.c:
			if h.killing() && len(h.seconds) == 0 {
				err = h.killAggregator()
			}
			aggregatorKills.again(h, h.progress.share() < c.KillUntil)
		case <-tick.C:
		}
		if err != nil {
			return err
		}

		if done, err := h.superviseAggregator(); done || err != nil {
			return err
		}
		if err := h.superviseWorkers(); err != nil {
			return err
		}
		if err := h.superviseSeconds(); err != nil {
			return err
		}
		if err := h.superviseShared(); err != nil {
			return err
		}
		if !h.keyDue.IsZero() && time.Now().After(h.keyDue) {
			err = h.updateKeyFile()
		}
		share := h.progress.share()
		switch {
		case err != nil:
		case time.Since(h.lastStart) >= settle && due(&natsAt, share):
			err = h.restartNATS(ctx)
		case len(h.seconds) == 0 && due(&aggAt, share):
			// Not while a second aggregator waits: it could rightly take
			// the place of the dead one.
			err = h.killAggregator()
		case due(&replayAt, share):
			err = h.replay()
		case h.aggregatorSettled() && due(&secondAt, share):
			err = h.startSecondAggregator()
		case h.keyDue.IsZero() && time.Since(h.lastStart) >= settle && h.workersStarted() && due(&rotateAt, share):
			// Not while a worker just started may still be checking
			// the backend with the old key (its preflight, which for a
			// hidden-states run extracts and verifies a probe, then its
			// own look at the model): it would be refused and exit, as
			// it should, but not for what the run is about.
			err = h.rotateKey()
		case c.Shared != "" && due(&scheduleAt, share):
			err = h.changeSchedule()
		}
		if err != nil {
			return err
		}
	}
}

// settle is how long a process just started is given to connect before
// the NATS server is stopped: aerie commands that cannot reach NATS when
// they start exit at once (their service units restart them), which is
// not what the run is about.
const settle = 2 * time.Second

// killing reports whether progress is in the window where processes are
// killed on a timer.
func (h *Harness) killing() bool {
	share := h.progress.share()
	return share >= h.cfg.KillFrom && share < h.cfg.KillUntil
}

// due pops the first share of a sorted list when progress has reached it.
func due(shares *[]float64, share float64) bool {
	if len(*shares) == 0 || share < (*shares)[0] {
		return false
	}
	*shares = (*shares)[1:]
	return true
}

// repeat is a timer that fires at jittered intervals around a mean; its
// channel is nil (never ready) once it is off.
type repeat struct {
	t    *time.Timer
	c    <-chan time.Time
	mean time.Duration
}

// every returns a repeat around mean; a zero mean never fires.
func (h *Harness) every(mean time.Duration) *repeat {
	r := &repeat{mean: mean}
	if mean > 0 {
		r.t = time.NewTimer(h.jitter(mean))
		r.c = r.t.C
	}
	return r
}

// again arms the timer for the next firing if more, and turns it off
// otherwise.
func (r *repeat) again(h *Harness, more bool) {
	if !more {
		r.stop()
		return
	}
	r.t.Reset(h.jitter(r.mean))
}

func (r *repeat) stop() {
	if r.t != nil {
		r.t.Stop()
	}
	r.c = nil
}

// stuckCheck tells a stuck run from a slow one: the output files have not
// grown for a while and no consumer of the run has anything pending or
// unacknowledged, so nothing is left that could make them grow.
type stuckCheck struct {
	after time.Duration // zero: 30 seconds
	lines int
	since time.Time
}

func (s *stuckCheck) is(ctx context.Context, h *Harness) bool {
	if n := h.progress.lines(); n != s.lines {
		s.lines, s.since = n, time.Now()
		return false
	}
	after := s.after
	if after == 0 {
		after = 30 * time.Second
	}
	quiet := time.Since(s.since)
	if quiet < after {
		return false
	}
	if ok, err := idle(ctx, h.js, h.cfg.Run); err != nil || !ok {
		return false
	}
	h.log("stuck: %s written, nothing new for %v, and no consumer of the run has anything pending or unacknowledged", &h.progress, quiet.Round(time.Second))
	return true
}

// jitter draws an interval between half and one and a half times d.
func (h *Harness) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + h.rng.Float64()))
}

// superviseAggregator reports done when the aggregator exited 0; one that
// exited otherwise is noted and replaced.
func (h *Harness) superviseAggregator() (done bool, err error) {
	a := h.aggregator
	if !a.exited() {
		return false, nil
	}
	if a.err == nil && !a.stopped.Load() {
		h.log("%s finished the run: %s written", a.name, &h.progress)
		return true, nil
	}
	if bad, how := a.unexpectedExit(); bad {
		h.noteUnexpected(a, how)
		return false, h.startAggregator()
	}
	return false, nil
}

// superviseWorkers replaces workers that exited on their own.
func (h *Harness) superviseWorkers() error {
	for i := 0; i < len(h.workers); i++ {
		w := h.workers[i]
		bad, how := w.unexpectedExit()
		if !bad {
			continue
		}
		h.noteUnexpected(w, how)
		h.tap.stop(w.name)
		h.workers = slices.Delete(h.workers, i, i+1)
		i--
		if err := h.startWorker(); err != nil {
			return err
		}
	}
	return nil
}

func (h *Harness) noteUnexpected(p *process, how string) {
	note := fmt.Sprintf("%s (pid %d) exited on its own after %v: %s; last lines of %s:\n%s",
		p.name, p.pid(), time.Since(p.started).Round(time.Millisecond), how, p.logPath, p.tail(8))
	h.unexpected = append(h.unexpected, note)
	h.log("UNEXPECTED: %s", note)
}

// killWorker kills a random running worker and starts a new one.
func (h *Harness) killWorker() error {
	if len(h.workers) == 0 {
		return h.startWorker()
	}
	i := h.rng.IntN(len(h.workers))
	w := h.workers[i]
	w.kill()
	h.tap.stop(w.name)
	h.workers = slices.Delete(h.workers, i, i+1)
	h.kills.Workers++
	h.log("kill -9 worker %s (pid %d, up %v) at %s", w.name, w.pid(), time.Since(w.started).Round(time.Millisecond), &h.progress)
	return h.startWorker()
}

// killAggregator kills the aggregator, unless it already finished, and
// starts a new one.
func (h *Harness) killAggregator() error {
	a := h.aggregator
	if a.exited() {
		return nil // finished, or crashed: superviseAggregator deals with it
	}
	a.kill()
	h.kills.Aggregators++
	h.log("kill -9 %s (pid %d) at %s", a.name, a.pid(), &h.progress)
	return h.startAggregator()
}

// restartNATS stops the server as configured, waits NATSDown, and starts
// a new one on the same address and store.
func (h *Harness) restartNATS(ctx context.Context) error {
	s := h.server
	how := "kill -9"
	if h.cfg.NATSStop == StopTerm {
		how = "SIGTERM"
		s.terminate(30 * time.Second)
	} else {
		s.kill()
	}
	h.kills.NATS++
	h.log("%s NATS server %s (pid %d) at %s; down for %v", how, s.name, s.pid(), &h.progress, h.cfg.NATSDown)
	down := time.NewTimer(h.cfg.NATSDown)
	select {
	case <-ctx.Done():
		down.Stop()
		return ctx.Err()
	case <-down.C:
	}
	if err := h.startServer(ctx); err != nil {
		return err
	}
	h.log("NATS server %s (pid %d) up again on %s", h.server.name, h.server.pid(), h.natsAddr)
	return nil
}

// replay runs `aerie replay` for the run and waits for it.
func (h *Harness) replay() error {
	p, err := h.start(h.next("replay"), "replay", "--nats", h.NATSURL(), "--run", h.cfg.Run)
	if err != nil {
		return err
	}
	if err := p.wait(2 * time.Minute); err != nil {
		return fmt.Errorf("%s: %w\n%s", p.name, err, p.tail(20))
	}
	h.kills.Replays++
	h.log("%s at %s: %s", p.name, &h.progress, strings.Join(strings.Fields(p.tail(6)), " "))
	return nil
}

// workersStarted reports whether every live worker has logged its start,
// past its preflight and its check of the backend.
func (h *Harness) workersStarted() bool {
	for _, w := range h.workers {
		if w.exited() {
			continue
		}
		b, err := os.ReadFile(w.logPath)
		if err != nil || !bytes.Contains(b, []byte(`msg="worker started"`)) {
			return false
		}
	}
	return true
}

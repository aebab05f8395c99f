package worker

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/runs"
)

// A worker says when its run becomes done (runs.Done), and when prompts
// come again; with Config.ExitWhenDone it then stops, as a worker does on
// SIGTERM.

// donePoll is how often a worker looks whether its runs are done, and
// whether a peer went silent.
const donePoll = 2 * time.Second

// cameBackLogEvery spaces the lines saying that prompts came back.
const cameBackLogEvery = 10 * time.Second

// silentAfter is how many heartbeat periods without one make a peer
// silent.
const silentAfter = 3

// sayPeersGone logs each worker of l's run that went silent without
// saying it was stopping: the prompts it held come back to the run's
// workers once their AckWait has passed without a progress ack.
func sayPeersGone(l *lane, heartbeat time.Duration) {
	for _, p := range l.peers.newlySilent(time.Now(), silentAfter*heartbeat) {
		back := p.since.Add(l.ackWait)
		l.log.Warn("a worker of the run went silent: the prompts it held come back after the AckWait",
			"peer", p.name, "last_heard", time.Since(p.since).Round(time.Second), "held", p.inFlight,
			"ack_wait", l.ackWait, "back_by", back.Format(time.TimeOnly))
	}
}

// runState is what a worker last found of its run's end.
type runState int

const (
	runUnknown runState = iota
	runGoing
	runDone
)

// watchDone follows whether l's run is done until ctx ends, logging each
// change, and what its other workers' heartbeats (every heartbeat) say
// of them; once it is done it calls onDone (nil: nothing).
func watchDone(ctx context.Context, js jetstream.JetStream, l *lane, heartbeat time.Duration, onDone func()) {
	t := time.NewTicker(donePoll)
	defer t.Stop()
	state, warned := runUnknown, false
	var backSaid int64
	lastBack := time.Time{}
	for {
		sayPeersGone(l, heartbeat)
		if n := l.cameBack.Load(); n > backSaid && time.Since(lastBack) >= cameBackLogEvery {
			args := []any{"prompts", n - backSaid, "total", n}
			if quiet := l.peers.quiet(time.Now(), heartbeat*3/2); len(quiet) > 0 {
				args = append(args, "silent_workers", strings.Join(quiet, ","))
			}
			l.log.Info("prompts delivered before came back to this worker (after a worker died, a hand-back or a retry)", args...)
			backSaid, lastBack = n, time.Now()
		}
		ev, err := runs.Done(ctx, js, l.run)
		if err == nil && warned {
			warned = false
			l.log.Info("the run's state can be read again")
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			// Once a spell: most often a cluster electing a leader, which
			// passes; a key that may not read the events does not.
			if !warned {
				warned = true
				l.log.Warn("cannot tell whether the run is done: reading the run's state failed; asking again (a cluster electing a leader or a server out of reach passes by itself; if this lasts, the key may not read the aggregator's events: a users.conf from before workers could, which aerie auth init rewrites)",
					"err", err, "every", donePoll)
			}
		case ev != nil && state != runDone:
			state = runDone
			l.log.Info("run done: every prompt has its answer or its failure written", "completed", ev.Completed, "failed", ev.Failed, "total", ev.Total)
			if onDone != nil {
				onDone()
				return
			}
		case ev == nil && state == runDone:
			state = runGoing
			l.log.Info("the run has prompts again (a replay or a reconcile)")
		case ev == nil:
			state = runGoing
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

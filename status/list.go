package status

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
)

// List returns one line per run on the server, sorted by name: every run
// whose manifest is in the runs bucket (as `aerie runs ls` lists them),
// with its last throughput event. A server where nothing was produced
// has none.
func List(ctx context.Context, js jetstream.JetStream, opts Options) ([]Line, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	summaries, err := runs.List(ctx, js, opts.Request)
	if err != nil {
		return nil, fmt.Errorf("list the runs: %w", err)
	}
	r := reader{js: js, opts: opts.Request}
	events, err := r.stream(ctx, schema.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("list the runs: %w", err)
	}
	now := time.Now()
	lines := make([]Line, 0, len(summaries))
	for _, s := range summaries {
		l := Line{Run: s.Run, Model: s.Model, Total: s.Total, Problem: s.Problem, ETASec: -1, ETALowSec: -1, ETAHighSec: -1}
		if events != nil {
			ev, at, err := lastThroughput(ctx, r, events, s.Run)
			if err != nil {
				return nil, fmt.Errorf("list the runs: %w", err)
			}
			if ev != nil {
				a := age(at, now, opts.EventStaleAfter)
				a.Stale = a.Stale && ev.Phase != schema.PhaseDone
				l.Event = &a
				l.Phase, l.Completed, l.Failed = ev.Phase, ev.Completed, ev.Failed
				l.ETASec, l.ETALowSec, l.ETAHighSec = eta(ev)
			}
		}
		lines = append(lines, l)
	}
	return lines, nil
}

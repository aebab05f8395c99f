package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/status"
)

const statusHelp = `Shows how a run is going, from NATS alone: completed and total, failures
by reason, prompts in flight, requests/s and tokens/s, the ETA with its
band, the phase, the aggregator, and one line per worker (host, backend,
window, in flight, tokens/s, paused and why, age of its last heartbeat;
a worker silent for %v is STALE). Without --run, one line per run.
--watch redraws every --interval until Ctrl-C.
`

func cmdStatus(ctx context.Context, args []string) error {
	synopsis := "[--run NAME] [--watch] [--interval 2s] [--json] [--nats URL]"
	fs, lf := newFlags("status", synopsis)
	describe(fs, "status", synopsis, fmt.Sprintf(statusHelp, status.DefaultStaleAfter))
	nf := addNATSFlags(fs, auth.Admin)
	run := fs.String("run", "", "run to show; empty lists every run")
	watch := fs.Bool("watch", false, "redraw every --interval until Ctrl-C (the screen is cleared only when stdout is a terminal)")
	interval := fs.Duration("interval", status.DefaultInterval, "time between two redraws with --watch")
	asJSON := fs.Bool("json", false, "print JSON (field names in docs/watching.md); with --watch one object a line")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *run != "" {
		if err := requireRun(*run); err != nil {
			return err
		}
	}
	if *interval <= 0 {
		return fmt.Errorf("--interval %v: use a positive duration such as 2s", *interval)
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx, nf, "aerie-status", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	draw := status.Frame(js, *run, *asJSON, *watch, status.Options{})
	if !*watch {
		return draw(ctx, os.Stdout)
	}
	between := "\n"
	if *asJSON {
		between = ""
	}
	return status.Watch(ctx, os.Stdout, *interval, pipeline.IsTerminal(os.Stdout) && !*asJSON, between, draw)
}

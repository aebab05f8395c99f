package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/aerie-dev/aerie/auth"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/runs"
)

const runsHelp = `Usage: aerie runs ls [--json] [--nats URL]
       aerie runs set RUN [--priority N] [--weight W] [--pause | --resume] [--nats URL]
       aerie runs rm RUN [--yes] [--force] [--nats URL]

ls lists the runs on the NATS server, sorted by name, one line each: name,
model, prompt count, when and on which host it was produced, and its
progress from its last throughput event (completed, failed, phase, and how
old that event is), and its schedule (priority, weight, paused). --json
prints a JSON array instead, for scripts.

set changes how a run shares the workers that serve several runs (aerie
work --runs or --all-runs), while it runs: the runs of the highest
priority with prompts waiting take every slot as slots free up; runs of
equal priority share slots in proportion to their weights, counted in
generated tokens. --pause stops workers from pulling the run's prompts
(those they hold finish; the rest stay queued), --resume lets them again.
No running request is cut.

rm removes everything a run has on the NATS server: its prompts, results,
dead letters, events and max-deliveries advisories, its consumers, its
manifest, its failure counts and its aggregator lease. A run name stays
bound to the model, sampling parameters and prompt count it was first
produced with; removing the run frees the name. Without --yes, rm only
prints what it would remove and exits with status 1. It refuses while the
run looks alive (a worker heartbeat in the last %v, or an aggregator
lease that has not expired) unless --force. Files on disk are not touched:
the aggregator's output stays under its <data-dir>/<run>.

Run 'aerie runs ls -h', 'aerie runs set -h' or 'aerie runs rm -h' for their
flags.
`

func runsUsage(w io.Writer) { fmt.Fprintf(w, runsHelp, runs.HeartbeatWindow) }

func cmdRuns(ctx context.Context, args []string) error {
	if len(args) == 0 {
		runsUsage(os.Stderr)
		return errors.New("name a subcommand: ls, set or rm")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		runsUsage(os.Stderr)
		return flag.ErrHelp
	case "ls":
		return cmdRunsList(ctx, args[1:])
	case "set":
		return cmdRunsSet(ctx, args[1:])
	case "rm":
		return cmdRunsRemove(ctx, args[1:])
	}
	return fmt.Errorf("unknown subcommand %q: use ls, set or rm (see aerie runs -h)", args[0])
}

func cmdRunsList(ctx context.Context, args []string) error {
	synopsis := "[--json] [--nats URL]"
	fs, lf := newFlags("runs ls", synopsis)
	describe(fs, "runs ls", synopsis, "Lists the runs on the NATS server with their model, size and progress.\n")
	nf := addNATSFlags(fs, auth.Admin)
	asJSON := fs.Bool("json", false, "print a JSON array, one object per run, instead of a table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see aerie runs -h)", fs.Arg(0))
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx, nf, "aerie-runs", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	list, err := runs.List(ctx, js, runs.Options{})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	return runs.WriteList(os.Stdout, list, time.Now())
}

func cmdRunsRemove(ctx context.Context, args []string) error {
	synopsis := "RUN [--yes] [--force] [--nats URL]"
	fs, lf := newFlags("runs rm", synopsis)
	describe(fs, "runs rm", synopsis, "Removes everything RUN has on the NATS server (see aerie runs -h).\n")
	nf := addNATSFlags(fs, auth.Admin)
	yes := fs.Bool("yes", false, "remove; without it, only print what would be removed and exit with status 1")
	force := fs.Bool("force", false, "remove even while the run looks alive (a recent worker heartbeat, a held aggregator lease)")
	run, err := parseOneRun(fs, args, "aerie runs rm RUN")
	if err != nil {
		return err
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx, nf, "aerie-runs", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	notFound := fmt.Errorf("run %s has nothing on this server: check the name (aerie runs ls) and --nats", run)
	if !*yes {
		r, err := runs.Plan(ctx, js, run, runs.Options{})
		if err != nil {
			return err
		}
		if r.Empty() {
			return notFound
		}
		if err := runs.WritePlan(os.Stdout, r); err != nil {
			return err
		}
		return fmt.Errorf("nothing was removed: add --yes to remove run %s", run)
	}
	r, err := runs.Remove(ctx, js, run, runs.RemoveOptions{Force: *force})
	if err != nil {
		return err
	}
	if r.Empty() {
		return notFound
	}
	return runs.WriteRemoved(os.Stdout, r)
}

func cmdRunsSet(ctx context.Context, args []string) error {
	synopsis := "RUN [--priority N] [--weight W] [--pause | --resume] [--nats URL]"
	fs, lf := newFlags("runs set", synopsis)
	describe(fs, "runs set", synopsis, "Changes how RUN shares the workers that serve several runs (see aerie runs -h).\n")
	nf := addNATSFlags(fs, auth.Admin)
	priority := fs.Int("priority", 0, "the run's priority: higher goes first, and takes every slot as slots free up")
	weight := fs.Float64("weight", 1, "the run's share among runs of equal priority, in generated tokens (above 0)")
	pause := fs.Bool("pause", false, "stop workers from pulling the run's prompts; those held finish, the rest stay queued")
	resume := fs.Bool("resume", false, "let workers pull the run's prompts again")
	run, err := parseOneRun(fs, args, "aerie runs set RUN --priority N")
	if err != nil {
		return err
	}
	if *pause && *resume {
		return errors.New("give --pause or --resume, not both")
	}
	var c runs.ScheduleChange
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "priority":
			c.Priority = priority
		case "weight":
			c.Weight = weight
		case "pause":
			c.Paused = pause
		case "resume":
			paused := !*resume
			c.Paused = &paused
		}
	})
	if c.Empty() {
		return errors.New("nothing to change: give --priority, --weight, --pause or --resume")
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("--weight: %w", err)
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx, nf, "aerie-runs", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	was, now, err := runs.SetSchedule(ctx, js, run, c, runs.Options{})
	if err != nil {
		return err
	}
	fmt.Printf("run %s: priority %d, weight %g, %s", run, now.Priority, now.Share(), pausedWord(now.Paused))
	if was == now {
		fmt.Println(" (unchanged)")
		return nil
	}
	fmt.Printf(" (was priority %d, weight %g, %s)\n", was.Priority, was.Share(), pausedWord(was.Paused))
	return nil
}

func pausedWord(p bool) string {
	if p {
		return "paused"
	}
	return "running"
}

// parseOneRun parses flags around exactly one run name, which it checks
// and returns; usage shows how to name it.
func parseOneRun(fs *flag.FlagSet, args []string, usage string) (string, error) {
	names, err := parseWithArgs(fs, args)
	if err != nil {
		return "", err
	}
	switch {
	case len(names) == 0:
		return "", fmt.Errorf("name the run: %s (aerie runs ls lists them)", usage)
	case len(names) > 1:
		return "", fmt.Errorf("name one run, not %d: %s", len(names), strings.Join(names, " "))
	}
	return names[0], requireRun(names[0])
}

// parseWithArgs parses flags that may come before, between or after the
// positional arguments, which it returns: `aerie runs rm RUN --yes` reads
// as naturally as `aerie runs rm --yes RUN`.
func parseWithArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

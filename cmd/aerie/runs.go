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
       aerie runs rm RUN [--yes] [--force] [--nats URL]

ls lists the runs on the NATS server, sorted by name, one line each: name,
model, prompt count, when and on which host it was produced, and its
progress from its last throughput event (completed, failed, phase, and how
old that event is). --json prints a JSON array instead, for scripts.

rm removes everything a run has on the NATS server: its prompts, results,
dead letters, events and max-deliveries advisories, its consumers, its
manifest, its failure counts and its aggregator lease. A run name stays
bound to the model, sampling parameters and prompt count it was first
produced with; removing the run frees the name. Without --yes, rm only
prints what it would remove and exits with status 1. It refuses while the
run looks alive (a worker heartbeat in the last %v, or an aggregator
lease that has not expired) unless --force. Files on disk are not touched:
the aggregator's output stays under its <data-dir>/<run>.

Run 'aerie runs ls -h' or 'aerie runs rm -h' for their flags.
`

func runsUsage(w io.Writer) { fmt.Fprintf(w, runsHelp, runs.HeartbeatWindow) }

func cmdRuns(ctx context.Context, args []string) error {
	if len(args) == 0 {
		runsUsage(os.Stderr)
		return errors.New("name a subcommand: ls or rm")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		runsUsage(os.Stderr)
		return flag.ErrHelp
	case "ls":
		return cmdRunsList(ctx, args[1:])
	case "rm":
		return cmdRunsRemove(ctx, args[1:])
	}
	return fmt.Errorf("unknown subcommand %q: use ls or rm (see aerie runs -h)", args[0])
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
	nc, js, err := connect(nf, "aerie-runs", log)
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
	names, err := parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(names) == 0:
		return errors.New("name the run to remove: aerie runs rm RUN (aerie runs ls lists them)")
	case len(names) > 1:
		return fmt.Errorf("name one run to remove, not %d: %s", len(names), strings.Join(names, " "))
	}
	run := names[0]
	if err := requireRun(run); err != nil {
		return err
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	nc, js, err := connect(nf, "aerie-runs", log)
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

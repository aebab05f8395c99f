package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/aerie-dev/aerie/auth"
	"path/filepath"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/requeue"
)

const reconcileHelp = `Compares a run's input with its output and puts back to work every prompt
that is in neither completions.jsonl nor failed.jsonl, has no answer or
dead letter waiting for the aggregator, and is neither queued nor with a
worker. Use it when a run ends short of its prompt count, for instance
after a broker lost part of its store. Give the file the run was produced
from; lines that do not parse are listed and ignored. With --samples,
each sample of a prompt is counted and requeued on its own, as it was
queued.

A prompt counts as with a worker (in flight) when it has been delivered
and the consumer's ack floor has not passed it. A prompt settled while an
older one is still being generated counts as in flight too, so run
reconcile again once the run is idle to catch those.
`

func cmdReconcile(ctx context.Context, args []string) error {
	synopsis := "--run NAME --prompts FILE [--data-dir /data] [--dry-run]"
	fs, lf := newFlags("reconcile", synopsis)
	describe(fs, "reconcile", synopsis, reconcileHelp)
	nf := addNATSFlags(fs, auth.Admin)
	run := fs.String("run", "", "run name")
	prompts := fs.String("prompts", "", "the JSONL file the run was produced from")
	dataDir := addDataDirFlag(fs, aggregator.DefaultDataDir, "")
	dryRun := fs.Bool("dry-run", false, "print what would be requeued and change nothing")
	log, err := parseRunFlags(fs, lf, args, run)
	if err != nil {
		return err
	}
	if *prompts == "" {
		return errors.New("--prompts is required: the JSONL file the run was produced from")
	}
	nc, js, err := connect(ctx, nf, "aerie-reconcile", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	dir := filepath.Join(*dataDir, *run)
	rep, err := requeue.Reconcile(ctx, js, requeue.ReconcileConfig{
		Run: *run, PromptsFile: *prompts, DryRun: *dryRun,
		CompletionsFile: filepath.Join(dir, aggregator.CompletionsFile),
		FailedFile:      filepath.Join(dir, aggregator.FailedFile),
	})
	if rep != nil {
		fmt.Print(rep)
	}
	return err
}

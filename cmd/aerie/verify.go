package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/bytesize"
	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/hscheck"
	"github.com/aerie-dev/aerie/schema"
)

const verifySynopsis = `--run NAME [--data-dir D] [--out DIR]

Checks a hidden-states run's output as its trainer will read it, before
hours of training rest on it: every sample's file against the result
that names it (size and SHA-256) and against its row (read whole and
verified: header, shape, dtype, token ids, every value finite), the
dataset's rows in idx order, and nothing else in hidden_states/. It
reads every file once, at about a gigabyte a second, needs no NATS, and
exits 1 when anything is wrong, naming it.`

func cmdVerify(_ context.Context, args []string) error {
	fs, lf := newFlags("verify", verifySynopsis)
	run := fs.String("run", "", "run name")
	dataDir := addDataDirFlag(fs, aggregator.DefaultDataDir, "")
	out := fs.String("out", "", "the run's output directory on this host, when not the one it was produced with (--out) nor <data-dir>/<run>/")
	if _, err := parseRunFlags(fs, lf, args, run); err != nil {
		return err
	}
	dir := filepath.Join(*dataDir, *run)
	m, err := dataset.ReadManifest(dir)
	if err != nil {
		return fmt.Errorf("verify run %s: %w: give the --data-dir its aggregator writes to", *run, err)
	}
	if m.Task != schema.TaskHiddenStates || m.Extraction == nil {
		return fmt.Errorf("verify run %s: not a hidden-states run: verify checks the files of extraction runs (aerie report covers the others)", *run)
	}
	target := *out
	switch {
	case target != "":
	case m.Extraction.Out != "":
		target = m.Extraction.Out
	default:
		target = dir
	}
	start := time.Now()
	rep, err := hscheck.Check(m, target, filepath.Join(dir, aggregator.CompletionsFile), filepath.Join(dir, aggregator.FailedFile))
	if err != nil {
		return fmt.Errorf("verify run %s: %w", *run, err)
	}
	fmt.Printf("run %s, %s: %s\n", *run, target, rep)
	fmt.Printf("read %s of hidden states in %s\n", bytesize.Format(sizeOf(target)), time.Since(start).Round(time.Millisecond))
	if !rep.OK() {
		return errors.New("the output is not whole: the files named above are not what the trainer needs; remove them and train with --on-missing skip (or generate), or extract the run again")
	}
	return nil
}

// sizeOf is the bytes of the files in dir's hidden_states/.
func sizeOf(dir string) int64 {
	entries, err := os.ReadDir(filepath.Join(dir, schema.HiddenStatesDir))
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

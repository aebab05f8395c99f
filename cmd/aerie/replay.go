package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/requeue"
)

const replayHelp = `Puts dead-lettered prompts of a run back to work. Dead letters are read from
the dead-letter stream without consuming them; each selected one whose
prompt has no answer yet is published again to the run's prompts, and its
dead letter removed, so the run's workers deliver it once more. With
--samples each sample of a prompt is replayed on its own, with its own
parameters; with --turns all the turns already stored are kept and the
conversation continues from the turn that failed. Selected
dead letters whose prompt already has an answer are skipped: it is done.
Poison dead letters (the prompt message could not be decoded) hold no
prompt and are only listed. If replay is interrupted, run it again: it
finishes what it started and never queues a prompt twice.

The aggregator keeps failed.jsonl in line with the dead letters: a replayed
prompt's line leaves it once its dead letter is gone, and the run is not
done until the prompt has its new outcome: a completion, or a new failed
line with its latest failure. An aggregator run with --exit-when-done that
has exited must be started again to write them.
`

func cmdReplay(ctx context.Context, args []string) error {
	synopsis := "--run NAME [--reason CLASS[,CLASS]] [--ids FILE] [--max-tokens N] [--dry-run]"
	fs, lf := newFlags("replay", synopsis)
	describe(fs, "replay", synopsis, replayHelp)
	nf := addNATSFlags(fs, auth.Admin)
	run := fs.String("run", "", "run name")
	reasons := fs.String("reason", "", "replay only dead letters of these reason classes, comma separated: "+strings.Join(requeue.Reasons, ", ")+" (default: every class)")
	ids := fs.String("ids", "", "replay only the prompt ids listed in `FILE`, one per line: plain text, a JSON string, or a JSON object with \"id\" (failed.jsonl will do); an object with \"sample\" too selects that sample only")
	maxTokens := fs.Int("max-tokens", 0, "generate the replayed prompts with this max_tokens instead of the run's (0: the run's), e.g. for truncated answers")
	dryRun := fs.Bool("dry-run", false, "print what would be replayed (counts by reason, first ids) and change nothing")
	log, err := parseRunFlags(fs, lf, args, run)
	if err != nil {
		return err
	}
	if *maxTokens < 0 {
		return errors.New("--max-tokens must not be negative")
	}
	cfg := requeue.ReplayConfig{Run: *run, IDsFile: *ids, DryRun: *dryRun, MaxTokens: *maxTokens}
	if *reasons != "" {
		for _, r := range strings.Split(*reasons, ",") {
			cfg.Reasons = append(cfg.Reasons, strings.TrimSpace(r))
		}
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("--reason: %w", err)
	}
	nc, js, err := connect(ctx, nf, "aerie-replay", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	rep, err := requeue.Replay(ctx, js, cfg)
	if rep != nil {
		fmt.Print(rep)
	}
	return err
}

// describe gives a command's usage a paragraph between the synopsis and
// the flags.
func describe(fs *flag.FlagSet, name, synopsis, text string) {
	fs.Usage = func() {
		var b strings.Builder
		printUsage(&b, fs, name, synopsis)
		usage, groups, _ := strings.Cut(b.String(), "\n")
		fmt.Fprintf(fs.Output(), "%s\n\n%s%s", usage, text, groups)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/aerie-dev/aerie/auth"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/dataset"
)

const exportSynopsis = `--run NAME [--data-dir D] --format F --out FILE [--include-truncated] [--from-stream]

Writes a run's answers in a trainer's or a batch tool's format, from
<data-dir>/<run>/completions.jsonl (and failed.jsonl), or with
--from-stream from the results stored in NATS. Formats:

  specforge     {"id", "conversations": [{"role", "content"}, ...,
                {"role": "assistant", "content", "reasoning_content"}]},
                every generated turn with its own reasoning (SpecForge)
  sharegpt      {"id", "conversations": [{"from": "system"|"human"|"gpt",
                "value"}]}, each answer's reasoning inline:
                "<think>\nR\n</think>\n\nC" (EAGLE-3 scripts)
  openai-batch  the OpenAI Batch / vllm run-batch output file: one line per
                custom_id, failed units with "response": null and "error"
  text          {"id", "text"}: each conversation rendered by the model's
                chat template (--chat-template); warns when the template
                dropped the reasoning
  speculators   {"id", "input_ids", "loss_mask", "metadata"} from the last
                turn's token ids (runs produced with --return-token-ids);
                the loss is on the last answer, earlier turns are context

With --samples, sample 0 keeps the prompt's id and sample k is "<id>#<k>".
Truncated answers are left out unless --include-truncated. The file is
written whole or not at all (--out - writes to stdout).`

func cmdExport(ctx context.Context, args []string) error {
	fs, lf := newFlags("export", exportSynopsis)
	nf := addNATSFlags(fs, auth.Admin)
	run := fs.String("run", "", "run name")
	dataDir := addDataDirFlag(fs, aggregator.DefaultDataDir, "")
	format := fs.String("format", "", "output format: "+strings.Join(dataset.Formats, ", "))
	out := fs.String("out", "", "file to write (- for stdout); written to a temporary file beside it and renamed when complete")
	truncated := fs.Bool("include-truncated", false, "keep answers cut at max_tokens (finish_reason length), left out by default")
	fromStream := fs.Bool("from-stream", false, "rebuild the lines from the run's results (and dead letters) in NATS instead of the files, when completions.jsonl is lost or edited")
	thinkOpen := fs.String("think-open", dataset.DefaultThinkOpen, "sharegpt: the tag before an answer's reasoning")
	thinkClose := fs.String("think-close", dataset.DefaultThinkClose, "sharegpt: the tag after an answer's reasoning")
	chatTemplate := fs.String("chat-template", "", "text: the model's tokenizer_config.json (its chat_template, bos_token, eos_token) or a .jinja chat template")
	log, err := parseRunFlags(fs, lf, args, run)
	if err != nil {
		return err
	}
	if *format == "" {
		return fmt.Errorf("--format is required: one of %s", strings.Join(dataset.Formats, ", "))
	}
	if *out == "" {
		return errors.New("--out is required: the file to write, or - for stdout")
	}
	opts := dataset.ExportOptions{Format: *format, Run: *run, IncludeTruncated: *truncated, ThinkOpen: *thinkOpen, ThinkClose: *thinkClose}
	if *chatTemplate != "" {
		if opts.ChatTemplate, err = dataset.LoadChatTemplate(*chatTemplate); err != nil {
			return err
		}
	}
	if err := opts.Validate(); err != nil {
		return err
	}

	var src dataset.Source = dataset.Files(filepath.Join(*dataDir, *run))
	var streams *dataset.Streams
	if *fromStream {
		nc, js, err := connect(nf, "aerie-export", log)
		if err != nil {
			return err
		}
		defer nc.Close()
		streams = &dataset.Streams{JS: js, Run: *run}
		src = streams
	}

	var sum dataset.Summary
	write := func(w io.Writer) error {
		var err error
		sum, err = dataset.Export(ctx, src, w, opts)
		return err
	}
	if *out == "-" {
		err = write(os.Stdout)
	} else {
		err = dataset.WriteFileAtomic(*out, write)
	}
	if err != nil {
		return fmt.Errorf("export run %s: %w", *run, err)
	}
	fmt.Fprintf(os.Stderr, "aerie export: %s\n", sum)
	if streams != nil && streams.Undecodable > 0 {
		fmt.Fprintf(os.Stderr, "aerie export: warning: %d stored messages could not be decoded and are left out\n", streams.Undecodable)
	}
	if sum.ReasoningLost > 0 {
		fmt.Fprintf(os.Stderr, "aerie export: warning: in %d of %d lines the chat template dropped the answer's reasoning: a drafter trained on them never sees the thinking; use --format sharegpt or specforge, or a template that renders reasoning_content\n", sum.ReasoningLost, sum.Written)
	}
	return nil
}

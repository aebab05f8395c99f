package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/export"
	"github.com/aerie-dev/aerie/schema"
)

const exportSynopsis = `--run NAME [--data-dir D] --format F --out FILE|DIR [--drop F,...] [--dedupe prompt|answer] [--max-length N] [--from-stream]

Writes a run's answers in a trainer's or a batch tool's format, from
<data-dir>/<run>/completions.jsonl (and failed.jsonl), or with
--from-stream from the results stored in NATS. Formats:

  specforge     SpecForge's regenerated row (scripts/regenerate_train_data.py):
                {"id", "conversations": [{"role", "content"}, ...,
                {"role": "assistant", "content", "reasoning_content"}],
                "status": "success"}; reasoning_content only on turns the
                target generated; system messages kept as role system
  speculators   one row per generated turn, as speculators' regenerator
                writes it: {"id", "primary_id", "input_ids", "loss_mask",
                "metadata"}, the prompt's token ids then the answer's, the
                loss on the answer (runs produced with --return-token-ids);
                the exact route, reasoning included, for speculators and
                for SpecForge's data.prompts_path
  parquet       the specforge rows as a Hugging Face dataset in DIR:
                data/train-0000K-of-0000N.parquet and a dataset card
  sharegpt      {"id", "conversations": [{"from": "system"|"human"|"gpt",
                "value"}]}, each answer's reasoning inline:
                "<think>\nR\n</think>\n\nC" (EAGLE-3 scripts); --system
  openai-batch  the OpenAI Batch / vllm run-batch output file: one line per
                custom_id, truncated answers with finish_reason "length",
                failed units with "response": null and "error"
  text          {"id", "text"}: each conversation rendered by the model's
                chat template (--chat-template); warns when the template
                dropped the reasoning

Filters, the same for every format (--drop): truncated, empty,
reasoning-only, no-reasoning, non-target-turns (rows holding assistant
turns of the prompts file, not of the target). Trainer formats drop
truncated,empty unless --drop says otherwise (--drop none keeps all);
openai-batch drops nothing. Token counts come from the stored usage.

With --samples, sample 0 keeps the prompt's id and sample k is "<id>#<k>";
in speculators rows, turn k before the last is "<id>:t<k>". A run with
answers of the built-in simulator is refused unless --allow-simulated.
The output is written whole or not at all (--out - writes to stdout),
with a summary on stderr and in <out>.export.json: rows dropped by each
filter, lengths, and the trainer's settings and command for the file.`

func cmdExport(ctx context.Context, args []string) error {
	fs, lf := newFlags("export", exportSynopsis)
	nf := addNATSFlags(fs, auth.Admin)
	run := fs.String("run", "", "run name")
	dataDir := addDataDirFlag(fs, aggregator.DefaultDataDir, "")
	format := fs.String("format", "", "output format: "+strings.Join(export.Formats, ", "))
	out := fs.String("out", "", "file to write (- for stdout), or with parquet a new or empty directory; written beside it and renamed when complete")
	drop := fs.String("drop", "", "filters of rows to leave out, comma-separated: "+strings.Join(export.Filters, ",")+", or none (default: truncated,empty for trainer formats, none for openai-batch)")
	dedupe := fs.String("dedupe", "", "keep the first row of each prompt or answer (prompt|answer): exact match after normalizing white space")
	maxLength := fs.Int("max-length", 0, "the trainer's sequence length in tokens (SpecForge max_length, speculators --seq-length): drop rows whose prompt alone reaches it, count rows it will cut")
	system := fs.String("system", export.SystemKeep, "sharegpt: what to do with system messages: keep, drop, or merge (in front of the first human turn)")
	allowSimulated := fs.Bool("allow-simulated", false, "export answers of the built-in simulator, marked as simulated (refused without it)")
	shardSize := fs.Int64("shard-size", export.DefaultShardSize, "parquet: the largest shard, in bytes")
	truncated := fs.Bool("include-truncated", false, "keep answers cut at max_tokens: the same as leaving truncated out of --drop")
	fromStream := fs.Bool("from-stream", false, "rebuild the lines from the run's results (and dead letters) in NATS instead of the files, when completions.jsonl is lost or edited")
	thinkOpen := fs.String("think-open", export.DefaultThinkOpen, "sharegpt: the tag before an answer's reasoning")
	thinkClose := fs.String("think-close", export.DefaultThinkClose, "sharegpt: the tag after an answer's reasoning")
	chatTemplate := fs.String("chat-template", "", "text: the model's tokenizer_config.json (its chat_template, bos_token, eos_token) or a .jinja chat template")
	log, err := parseRunFlags(fs, lf, args, run)
	if err != nil {
		return err
	}
	if *format == "" {
		return fmt.Errorf("--format is required: one of %s", strings.Join(export.Formats, ", "))
	}
	if *out == "" {
		return errors.New("--out is required: the file to write, or - for stdout")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["max-length"] && *maxLength < 1 {
		return fmt.Errorf("--max-length %d: the trainer's sequence length in tokens, from 1 (SpecForge's max_length defaults to 2048, speculators' --seq-length to 8192)", *maxLength)
	}
	if set["shard-size"] && *shardSize < 1 {
		return fmt.Errorf("--shard-size %d: a shard's largest size in bytes, from 1 (default %d)", *shardSize, int64(export.DefaultShardSize))
	}
	opts := export.Options{Format: *format, Run: *run, Dedupe: *dedupe, MaxLength: *maxLength,
		AllowSimulated: *allowSimulated, ThinkOpen: *thinkOpen, ThinkClose: *thinkClose, Out: *out, Version: schema.BuildVersion()}
	if *format == export.FormatShareGPT || set["system"] {
		opts.System = *system
	}
	if *format == export.FormatParquet {
		opts.ShardSize = *shardSize
	}
	if set["drop"] {
		if opts.Drop, err = export.ParseDrop(*drop); err != nil {
			return err
		}
	}
	if *truncated {
		opts.Drop = withoutTruncated(opts)
	}
	if *chatTemplate != "" {
		if opts.ChatTemplate, err = export.LoadChatTemplate(*chatTemplate); err != nil {
			return err
		}
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if *format == export.FormatParquet {
		if *out == "-" {
			return errors.New("format parquet writes a directory: give --out DIR")
		}
		if err := export.CheckParquetTarget(*out); err != nil {
			return err
		}
	}

	runDir := filepath.Join(*dataDir, *run)
	var src export.Source = export.Files(runDir)
	var streams *export.Streams
	var merr error // reading the manifest
	if *fromStream {
		nc, js, err := connect(ctx, nf, "aerie-export", log)
		if err != nil {
			return err
		}
		defer nc.Close()
		streams = &export.Streams{JS: js, Run: *run}
		src = streams
		opts.Manifest, merr = streams.Manifest(ctx)
	} else {
		opts.Manifest, merr = dataset.ReadManifest(runDir)
	}
	// A manifest of a version this build does not read is a run it may
	// misread: refused. A missing one only leaves the card without it.
	if ve := (*schema.VersionError)(nil); errors.As(merr, &ve) {
		return fmt.Errorf("export run %s: %w", *run, merr)
	}

	var sum export.Summary
	switch {
	case *format == export.FormatParquet:
		sum, err = export.WriteParquet(ctx, src, *out, opts)
	case *out == "-":
		sum, err = export.Write(ctx, src, os.Stdout, opts)
	default:
		err = dataset.WriteFileAtomic(*out, func(w io.Writer) error {
			var err error
			sum, err = export.Write(ctx, src, w, opts)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("export run %s: %w", *run, err)
	}
	fmt.Fprintf(os.Stderr, "aerie export: %s\n", sum)
	if streams != nil && streams.Undecodable > 0 {
		fmt.Fprintf(os.Stderr, "aerie export: warning: %d stored messages could not be decoded and are left out\n", streams.Undecodable)
	}
	if *out != "-" {
		path := strings.TrimRight(*out, string(filepath.Separator)) + ".export.json"
		if err := dataset.WriteFileAtomic(path, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			return enc.Encode(sum)
		}); err != nil {
			return fmt.Errorf("export run %s: summary: %w", *run, err)
		}
		fmt.Fprintf(os.Stderr, "aerie export: summary in %s\n", path)
	}
	return nil
}

// withoutTruncated is the --drop list in force without truncated, for
// --include-truncated.
func withoutTruncated(opts export.Options) []string {
	list := opts.Drop
	if list == nil {
		list = export.DefaultDrop(opts.Format)
	}
	out := []string{}
	for _, d := range list {
		if d != export.DropTruncated {
			out = append(out, d)
		}
	}
	return out
}

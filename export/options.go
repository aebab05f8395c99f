package export

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aerie-dev/aerie/schema"
)

// Export formats: the shapes trainers and batch tools read.
const (
	// FormatSpecForge is the row SpecForge's scripts/regenerate_train_data.py
	// writes: {"id", "conversations": [{"role", "content"}, ...,
	// {"role": "assistant", "content", "reasoning_content"}], "status":
	// "success"}, reasoning_content only on the turns the target wrote.
	FormatSpecForge = "specforge"
	// FormatShareGPT is the ShareGPT shape the original EAGLE-3 scripts
	// read: {"id", "conversations": [{"from", "value"}]}, each answer's
	// reasoning inline between the think tags.
	FormatShareGPT = "sharegpt"
	// FormatOpenAIBatch is the OpenAI Batch (and vllm run-batch) output
	// shape, one line per custom_id, failed units included.
	FormatOpenAIBatch = "openai-batch"
	// FormatText is SpecForge's preformatted {"id", "text"}: each
	// conversation rendered by the model's own chat template.
	FormatText = "text"
	// FormatSpeculators is the row speculators' response regenerator
	// writes, one per generated turn: {"id", "primary_id", "input_ids",
	// "loss_mask", "metadata"}, from the token ids a run stored with
	// --return-token-ids.
	FormatSpeculators = "speculators"
	// FormatParquet is the specforge row as a Hugging Face dataset: a
	// directory of Parquet shards under data/ and a dataset card.
	FormatParquet = "parquet"
)

// Formats lists every export format.
var Formats = []string{FormatSpecForge, FormatShareGPT, FormatOpenAIBatch, FormatText, FormatSpeculators, FormatParquet}

// isTrainerFormat reports whether format is read by a trainer, which
// must not learn from cut or empty answers.
func isTrainerFormat(format string) bool { return format != FormatOpenAIBatch }

// Default think tags of FormatShareGPT.
const (
	DefaultThinkOpen  = "<think>"
	DefaultThinkClose = "</think>"
)

// Filters of --drop: which rows an export leaves out.
const (
	// DropTruncated: an answer cut at max_tokens.
	DropTruncated = "truncated"
	// DropEmpty: a generated turn with neither content nor reasoning.
	DropEmpty = "empty"
	// DropReasoningOnly: a generated turn with reasoning and no content
	// (SpecForge's validator rejects an empty content).
	DropReasoningOnly = "reasoning-only"
	// DropNoReasoning: a generated turn without reasoning (SpecForge's
	// validator with --expect-reasoning rejects it).
	DropNoReasoning = "no-reasoning"
	// DropNonTargetTurns: a row holding an assistant turn that the
	// target did not generate: the prompt file's own answers.
	DropNonTargetTurns = "non-target-turns"
)

// Filters lists every --drop filter, in the order a row is tested: a
// row dropped by more than one is counted under the first.
var Filters = []string{DropTruncated, DropEmpty, DropReasoningOnly, DropNoReasoning, DropNonTargetTurns}

// Why a row is left out beyond --drop (Summary.Dropped).
const (
	DroppedDuplicatePrompt = "duplicate-prompt"
	DroppedDuplicateAnswer = "duplicate-answer"
	DroppedPromptTooLong   = "prompt-reaches-max-length"
	DroppedNoTokenIDs      = "no-token-ids"
	DroppedTemplateError   = "chat-template-error"
)

// --dedupe keys.
const (
	DedupePrompt = "prompt"
	DedupeAnswer = "answer"
)

// --system of FormatShareGPT.
const (
	SystemKeep  = "keep"
	SystemDrop  = "drop"
	SystemMerge = "merge"
)

// DefaultShardSize bounds a Parquet shard: 500 MB, the size the Hugging
// Face hub's own Parquet conversion aims at.
const DefaultShardSize = 500_000_000

// Options say how lines are exported. The zero value is not
// usable: Format is required; every other zero value is the default.
type Options struct {
	Format string
	// Run names the run; FormatOpenAIBatch derives its request ids from
	// it and the custom_id, so that an export made twice is the same.
	Run string
	// Drop lists the --drop filters. Nil is the format's default:
	// truncated and empty for the trainer formats, nothing for
	// FormatOpenAIBatch. An empty, non-nil list drops nothing.
	Drop []string
	// Dedupe keeps the first row of each prompt or each answer
	// (DedupePrompt, DedupeAnswer); empty keeps every row.
	Dedupe string
	// MaxLength is the trainer's sequence length in tokens: a row whose
	// prompt alone reaches it is dropped, a longer row is counted as one
	// the trainer will cut. Zero checks nothing.
	MaxLength int
	// System says what FormatShareGPT does with system messages:
	// SystemKeep (empty), SystemDrop or SystemMerge.
	System string
	// AllowSimulated lets answers of aerie's simulator into the export;
	// without it a run holding one is refused.
	AllowSimulated bool
	// ThinkOpen and ThinkClose wrap the reasoning in FormatShareGPT;
	// empty means DefaultThinkOpen and DefaultThinkClose.
	ThinkOpen, ThinkClose string
	// ChatTemplate renders FormatText; required for it.
	ChatTemplate *ChatTemplate
	// ShardSize bounds a FormatParquet shard in bytes; zero means
	// DefaultShardSize.
	ShardSize int64
	// Manifest is the run's, when known: Validate refuses a run that
	// needs a feature this build lacks, and the dataset card describes the
	// run from it, and with FormatSpeculators a run that asked for token
	// ids and has none names the backend as the cause.
	Manifest *schema.Manifest
	// Out is where the export goes, for the commands the summary
	// prints; empty prints a placeholder.
	Out string
	// Version is aerie's, for the dataset card.
	Version string
}

// Validate checks the options' values.
func (o Options) Validate() error {
	if !slices.Contains(Formats, o.Format) {
		return fmt.Errorf("format %q: use one of %s", o.Format, strings.Join(Formats, ", "))
	}
	if o.Format == FormatText && o.ChatTemplate == nil {
		return errors.New("format text needs --chat-template: the model's tokenizer_config.json or a .jinja file")
	}
	if o.Format != FormatText && o.ChatTemplate != nil {
		return fmt.Errorf("--chat-template is for format text, not %s", o.Format)
	}
	for _, d := range o.Drop {
		if !slices.Contains(Filters, d) {
			return unknownFilter(d)
		}
	}
	switch o.Dedupe {
	case "", DedupePrompt, DedupeAnswer:
	default:
		return fmt.Errorf("--dedupe %q: use prompt or answer", o.Dedupe)
	}
	if o.MaxLength < 0 {
		return fmt.Errorf("--max-length %d: a length in tokens from 1 (the trainer's max_length or --seq-length), or leave it out", o.MaxLength)
	}
	switch o.System {
	case "", SystemKeep, SystemDrop, SystemMerge:
	default:
		return fmt.Errorf("--system %q: use keep, drop or merge", o.System)
	}
	if o.System != "" && o.System != SystemKeep && o.Format != FormatShareGPT {
		return fmt.Errorf("--system is for format sharegpt: format %s keeps system messages as role system", o.Format)
	}
	if m := o.Manifest; m != nil {
		// Lines of a run that needs a feature this build lacks may carry
		// what it would drop or misread.
		if err := schema.CheckNeeds("run "+m.Run, m.Needs, m.WrittenBy); err != nil {
			return err
		}
		if m.Task == schema.TaskHiddenStates {
			out := "<data-dir>/" + m.Run
			if m.Extraction != nil && m.Extraction.Out != "" {
				out = m.Extraction.Out
			}
			return fmt.Errorf("a hidden-states run has no answers to export: its output, %s, is the dataset speculators trains from as it is (train.py --data-path)", out)
		}
	}
	if o.ShardSize < 0 || (o.ShardSize > 0 && o.Format != FormatParquet) {
		return errors.New("--shard-size is for format parquet, in bytes from 1")
	}
	return nil
}

// unknownFilter is the error of a --drop value that names no filter.
func unknownFilter(f string) error {
	return fmt.Errorf("--drop %q: not a filter; use any of %s, comma-separated, or none", f, strings.Join(Filters, ","))
}

// ParseDrop reads a --drop value: filters separated by commas, or
// "none". An unknown filter is an error naming the known ones.
func ParseDrop(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "none" {
		return []string{}, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(Filters, f) {
			return nil, unknownFilter(f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if out == nil {
		return nil, errors.New("--drop is empty: name filters, or none")
	}
	return out, nil
}

// DefaultDrop is the --drop of format when none is given: truncated and
// empty answers for the trainer formats, nothing for FormatOpenAIBatch,
// whose consumers expect every request answered.
func DefaultDrop(format string) []string {
	if isTrainerFormat(format) {
		return []string{DropTruncated, DropEmpty}
	}
	return []string{}
}

// drops is the set of filters in force.
func (o Options) drops() map[string]bool {
	list := o.Drop
	if list == nil {
		list = DefaultDrop(o.Format)
	}
	m := make(map[string]bool, len(list))
	for _, d := range list {
		m[d] = true
	}
	return m
}

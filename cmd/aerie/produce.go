package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/bytesize"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/producer"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// samplingFlags are the run's settings that go into the manifest: the
// model, the request parameters, which turns are generated, the samples
// per prompt and whether token ids are returned. An optional parameter
// left unset is not sent: the backend's default applies (for vLLM, the
// model's generation_config.json).
type samplingFlags struct {
	model              string
	maxTokens          int
	temperature        optionalFloat
	topP               optionalFloat
	topK               optionalInt
	minP               optionalFloat
	presencePenalty    optionalFloat
	frequencyPenalty   optionalFloat
	repetitionPenalty  optionalFloat
	seed               optionalInt64
	stop               stringList
	reasoningEffort    string
	chatTemplateKwargs jsonObject
	extraBody          jsonObject
	turns              string
	contextReasoning   string
	samples            int
	returnTokenIDs     bool
	needs              stringList
}

func addSamplingFlags(fs *flag.FlagSet, sf *samplingFlags, modelHelp string) {
	const unset = " (unset: the backend's default)"
	fs.StringVar(&sf.model, "model", "", modelHelp)
	fs.IntVar(&sf.maxTokens, "max-tokens", 0, "max completion tokens per prompt, reasoning included (0: the backend fills the context window)")
	fs.Var(&sf.temperature, "temperature", "sampling temperature"+unset)
	fs.Var(&sf.topP, "top-p", "nucleus sampling top_p, more than 0 and at most 1"+unset)
	fs.Var(&sf.topK, "top-k", "sample from the k most likely tokens only; -1 or 0 disable it"+unset)
	fs.Var(&sf.minP, "min-p", "drop tokens less likely than min_p times the most likely one, 0 to 1"+unset)
	fs.Var(&sf.presencePenalty, "presence-penalty", "penalty, -2 to 2, on tokens that already appeared"+unset)
	fs.Var(&sf.frequencyPenalty, "frequency-penalty", "penalty, -2 to 2, growing with how often a token appeared"+unset)
	fs.Var(&sf.repetitionPenalty, "repetition-penalty", "multiplicative penalty on repeated tokens, more than 0 (1: none)"+unset)
	fs.Var(&sf.seed, "seed", "sampling `seed`, for reproducible answers; with --samples, sample k is sent seed+k (unset: not seeded)")
	fs.Var(&sf.stop, "stop", "a `string` that ends the answer (not included in it); repeat the flag for several (unset: none)")
	fs.StringVar(&sf.reasoningEffort, "reasoning-effort", "", "reasoning_effort for reasoning models: minimal, low, medium or high"+unset)
	fs.Var(&sf.chatTemplateKwargs, "chat-template-kwargs", "`JSON` object passed to the model's chat template, e.g. '{\"enable_thinking\": false}' (Qwen3) or '{\"thinking\": true}' (Kimi)"+unset)
	sf.extraBody.check = func(obj json.RawMessage) error { return schema.Params{ExtraBody: obj}.Validate() }
	fs.Var(&sf.extraBody, "extra-body", "`JSON` object merged into every request body, for parameters without a flag, e.g. '{\"top_a\": 0.1}'; model, messages, stream, n and return_token_ids are aerie's own (unset: nothing more)")
	fs.StringVar(&sf.turns, "turns", schema.TurnsLast, "which assistant turns to generate: last (the answer to each conversation as given; earlier assistant turns are sent as they are) or all (regenerate every assistant turn in order, each with the model's own earlier answers in its context)")
	fs.StringVar(&sf.contextReasoning, "context-reasoning", schema.ContextReasoningDrop, "with --turns all, what an earlier generated answer carries into later turns: drop (its content only) or keep (its reasoning too, as reasoning_content)")
	fs.IntVar(&sf.samples, "samples", 1, fmt.Sprintf("independent answers per prompt, 1 to %d, each queued and written on its own (with --seed, sample k uses seed+k)", producer.MaxSamples))
	fs.BoolVar(&sf.returnTokenIDs, "return-token-ids", false, "ask the backend for the token ids of every prompt and answer (vLLM's return_token_ids), stored with each turn")
	fs.Var(&sf.needs, "needs", "a `feature` every worker, aggregator and export of the run must implement, besides those its settings need (aerie version lists them); repeat for several. Builds without it leave the run alone and say so")
}

func (sf *samplingFlags) params() schema.Params {
	return schema.Params{
		MaxTokens: sf.maxTokens, Temperature: sf.temperature.v, TopP: sf.topP.v, TopK: sf.topK.v, MinP: sf.minP.v,
		PresencePenalty: sf.presencePenalty.v, FrequencyPenalty: sf.frequencyPenalty.v, RepetitionPenalty: sf.repetitionPenalty.v,
		Seed: sf.seed.v, Stop: sf.stop.v, ReasoningEffort: sf.reasoningEffort,
		ChatTemplateKwargs: sf.chatTemplateKwargs.v, ExtraBody: sf.extraBody.v,
	}
}

// check refuses values the flags cannot take, naming the flag, before
// anything is started.
func (sf *samplingFlags) check() error {
	var errs []error
	switch sf.turns {
	case schema.TurnsLast, schema.TurnsAll:
	default:
		errs = append(errs, fmt.Errorf("--turns %q: use last or all", sf.turns))
	}
	switch sf.contextReasoning {
	case schema.ContextReasoningDrop:
	case schema.ContextReasoningKeep:
		if sf.turns != schema.TurnsAll {
			errs = append(errs, errors.New("--context-reasoning keep needs --turns all: with --turns last the earlier assistant turns are sent as the input gives them"))
		}
	default:
		errs = append(errs, fmt.Errorf("--context-reasoning %q: use drop or keep", sf.contextReasoning))
	}
	if sf.samples < 1 || sf.samples > producer.MaxSamples {
		errs = append(errs, fmt.Errorf("--samples %d: use 1 to %d", sf.samples, producer.MaxSamples))
	}
	if err := sf.params().Validate(); err != nil {
		errs = append(errs, flagErrors(err)...)
	}
	return errors.Join(errs...)
}

// flagErrors names the flag of each problem schema.Params.Validate found:
// each begins with the parameter's name, the flag's with dashes.
func flagErrors(err error) []error {
	list := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		list = joined.Unwrap()
	}
	out := make([]error, len(list))
	for i, e := range list {
		name, _, _ := strings.Cut(e.Error(), " ")
		out[i] = fmt.Errorf("--%s: %w", strings.ReplaceAll(name, "_", "-"), e)
	}
	return out
}

// produceSettings fills cfg's turns, samples and token ids from the flags.
func (sf *samplingFlags) produceSettings(cfg *producer.Config) {
	cfg.Turns, cfg.ContextReasoning, cfg.Samples, cfg.ReturnTokenIDs = sf.turns, sf.contextReasoning, sf.samples, sf.returnTokenIDs
	cfg.Needs = sf.needs.v
}

// addPolicyFlags binds the run's failure and truncation policy, which goes
// into the manifest so that every worker applies the same.
func addPolicyFlags(fs *flag.FlagSet, p *schema.Policy) {
	fs.IntVar(&p.MaxAttempts, "max-attempts", schema.DefaultMaxAttempts, "failures of a prompt's own (not backend outages) before it is dead-lettered")
	fs.StringVar(&p.OnLength, "on-length", schema.OnLengthKeep, "answers cut at max_tokens: keep (flagged truncated), dead-letter, or retry (twice the max_tokens, up to --length-retry-max-tokens)")
	fs.IntVar(&p.LengthRetryMaxTokens, "length-retry-max-tokens", 0, "cap on max_tokens for --on-length retry (0: four times --max-tokens)")
}

func cmdProduce(ctx context.Context, args []string) error {
	fs, lf := newFlags("produce", "--run NAME --prompts FILE --model M [--backend URL] [--max-tokens N] [--temperature T] [--top-p P] [--turns last|all] [--samples N] [...]")
	nf := addNATSFlags(fs, auth.Producer)
	run := fs.String("run", "", "run name (letters, digits, '-', '_')")
	prompts := fs.String("prompts", "", `JSONL file of prompts: {id, messages}, {id, conversations} or {id, prompt}, each with optional "params" of its own`)
	skip := fs.Bool("skip-invalid", false, "queue the valid lines even if some are invalid (they are listed)")
	dryRun := fs.Bool("dry-run", false, "validate the file and print what would be queued; publish nothing")
	order := addOrderFlag(fs)
	var sf samplingFlags
	addSamplingFlags(fs, &sf, "model name as the backend serves it (required)")
	bf := addBackendFlags(fs, "", "when given, it must serve --model before anything is queued; empty: no check")
	var policy schema.Policy
	addPolicyFlags(fs, &policy)
	var prov provision.Options
	fs.IntVar(&prov.Replicas, "replicas", 1, "stream replicas when the streams are created (3 on a three-node cluster)")
	fs.DurationVar(&prov.AckWait, "ack-wait", provision.DefaultAckWait, "when the run's consumer is created: how long a silent worker keeps a prompt before it is redelivered (workers progress-ack every ack-wait/3)")
	fs.IntVar(&prov.MaxDeliver, "max-deliver", provision.DefaultMaxDeliver, "when the run's consumer is created: attempts per prompt before it is dead-lettered")
	fs.IntVar(&prov.MaxAckPending, "max-ack-pending", provision.DefaultMaxAckPending, "when the run's consumer is created: prompts in flight across all workers; at least workers x window")
	var tf taskFlags
	addTaskFlags(fs, &tf)
	var sched schema.Schedule
	fs.IntVar(&sched.Priority, "priority", 0, "when workers serve several runs (aerie work --runs, --all-runs): higher goes first and takes every slot as slots free up; change it later with aerie runs set")
	fs.Float64Var(&sched.Weight, "weight", schema.DefaultWeight, "when workers serve several runs: the run's share among runs of equal priority, counted in generated tokens (above 0)")
	log, err := parseRunFlags(fs, lf, args, run)
	if err != nil {
		return err
	}
	if !(sched.Weight > 0) {
		return fmt.Errorf("--weight %v: a run's weight must be above 0 (1 is the default)", sched.Weight)
	}
	if *prompts == "" {
		return errors.New("--prompts is required: a JSONL file of prompts")
	}
	if err := sf.check(); err != nil {
		return err
	}
	extraction, err := tf.extraction(fs)
	if err != nil {
		return err
	}
	cfg := producer.Config{
		Run: *run, PromptsFile: *prompts, Model: sf.model, Params: sf.params(), Policy: policy,
		SkipInvalid: *skip, Progress: os.Stderr, Logger: log, Provision: prov, Order: *order,
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "priority" || f.Name == "weight" {
			cfg.Schedule = &sched
		}
	})
	sf.produceSettings(&cfg)
	if extraction != nil {
		cfg.Task, cfg.Extraction, cfg.VocabSize = schema.TaskHiddenStates, extraction, tf.vocabSize
	}
	if sf.model != "" {
		if err := checkModel(ctx, bf, sf.model, log); err != nil {
			return err
		}
		if extraction != nil && bf.url != "" {
			if err := extractionLimits(ctx, bf, sf.model, &cfg); err != nil {
				return err
			}
		}
	}
	if *dryRun {
		if cfg.Model == "" {
			cfg.Model = "(not set)"
		}
		rep, err := producer.Validate(ctx, cfg)
		if err != nil {
			return err
		}
		if extraction != nil {
			fmt.Printf("%s: %d samples valid, %d tokens, %s of hidden states to extract, prompts digest %s; nothing published (--dry-run)\n",
				*prompts, rep.Valid, rep.Tokens, bytesize.Format(rep.Bytes), rep.PromptsDigest)
			return nil
		}
		fmt.Printf("%s: %d lines, %d valid, %d invalid%s, prompts digest %s; would queue %s (%d of %d with a length hint); nothing published (--dry-run)\n",
			*prompts, rep.Lines, rep.Valid, rep.Invalid, unitsNote(rep), rep.PromptsDigest, rep.Order, rep.Hinted, rep.Valid)
		return nil
	}
	if sf.model == "" {
		return errors.New("--model is required: the model name as the backend serves it (see the backend's /v1/models)")
	}
	nc, js, err := connect(ctx, nf, "aerie-produce", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	rep, err := producer.Run(ctx, js, cfg)
	if err != nil {
		return err
	}
	if extraction != nil {
		fmt.Printf("run %s: %d samples valid, %d newly queued, %d already queued, %d tokens, %s of hidden states to extract, in %s\n",
			*run, rep.Valid, rep.Published, rep.AlreadyQueued, rep.Tokens, bytesize.Format(rep.Bytes), rep.Elapsed.Round(1e6))
		return nil
	}
	if rep.Samples > 1 {
		fmt.Printf("run %s: %d prompts valid x %d samples = %d samples, %d newly queued, %d already queued, %d invalid skipped, %s, in %s\n",
			*run, rep.Valid, rep.Samples, rep.Units, rep.Published, rep.AlreadyQueued, rep.Invalid, orderNote(rep), rep.Elapsed.Round(1e6))
		return nil
	}
	fmt.Printf("run %s: %d prompts valid, %d newly queued, %d already queued, %d invalid skipped, %s, in %s\n",
		*run, rep.Valid, rep.Published, rep.AlreadyQueued, rep.Invalid, orderNote(rep), rep.Elapsed.Round(1e6))
	return nil
}

// addOrderFlag declares --order, the order prompts are queued in.
func addOrderFlag(fs *flag.FlagSet) *string {
	return fs.String("order", "", "the order prompts are queued in: longest-first (by descending length hint: an input line's \"length_hint\" in tokens, or else its own final assistant answer at 4 bytes a token; the prompts without one after them) or input (the file's order); default longest-first when at least half the prompts have a hint")
}

// orderNote says in which order the prompts were queued, and why.
func orderNote(rep *producer.Report) string {
	return fmt.Sprintf("queued %s (%d of %d with a length hint)", rep.Order, rep.Hinted, rep.Valid)
}

// unitsNote says, for a dry run, what the valid prompts make when there
// is more than one sample or turn per prompt.
func unitsNote(rep *producer.Report) string {
	var s string
	if rep.Samples > 1 {
		s += fmt.Sprintf(" (%d samples to queue)", rep.Units)
	}
	if rep.Turns != rep.Units {
		s += fmt.Sprintf(" (%d turns to generate)", rep.Turns)
	}
	return s
}

// checkModel makes sure the backend of --backend, if given, serves model,
// before anything is queued: a run produced for a model that no worker's
// backend serves never starts, and its manifest keeps the wrong model.
func checkModel(ctx context.Context, bf *backendFlags, model string, log *slog.Logger) error {
	if bf.url == "" {
		return nil
	}
	key, err := bf.apiKey()
	if err != nil {
		return err
	}
	client, err := openai.New(openai.Config{BaseURL: bf.url, APIKey: key})
	if err != nil {
		return fmt.Errorf("--backend: %w", err)
	}
	if err := doctor.RequireModel(ctx, client, "the backend at "+bf.url, model); err != nil {
		return err
	}
	log.Info("the backend serves the model", "backend", bf.url, "model", model)
	return nil
}

// extractionLimits reads, from the backend of --backend, the longest
// sample it extracts (its max_model_len, less the one token generated),
// and has the producer ask it about the samples' largest token id.
func extractionLimits(ctx context.Context, bf *backendFlags, model string, cfg *producer.Config) error {
	key, err := bf.apiKey()
	if err != nil {
		return err
	}
	client, err := openai.New(openai.Config{BaseURL: bf.url, APIKey: key})
	if err != nil {
		return fmt.Errorf("--backend: %w", err)
	}
	models, err := client.Models(ctx)
	if err != nil {
		return fmt.Errorf("--backend: %w", err)
	}
	for _, m := range models {
		if m.ID == model && m.MaxModelLen > 1 {
			cfg.MaxInputTokens = m.MaxModelLen - 1
		}
	}
	cfg.CheckTokenIDs = doctor.TokenIDCheck(client, model)
	return nil
}

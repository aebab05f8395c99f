package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// bytesPerToken is the ratio of the token estimate. Tokenizers give about
// four bytes of English or code per token; other scripts can give fewer,
// so every report of an estimate says it is one.
const bytesPerToken = 4

// nearLimit is the share of max_model_len above which a prompt that fits
// by the estimate is still reported: the estimate may be off.
const nearLimit = 0.9

// maxNamed is how many prompts that do not fit a report names.
const maxNamed = 3

// estimateTokens estimates the prompt tokens of msgs as the bytes of their
// text divided by four, rounded up. It ignores the chat template's few
// tokens per message.
func estimateTokens(msgs []schema.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	return (n + bytesPerToken - 1) / bytesPerToken
}

// promptSize locates one prompt and its estimated length.
type promptSize struct {
	unit   string // "line" or "row"
	line   int
	id     string
	tokens int
}

func (p promptSize) String() string {
	return fmt.Sprintf("%s %d (id %q) about %d tokens", p.unit, p.line, dataset.Truncate(p.id, 60), p.tokens)
}

// promptScan summarises a prompts file.
type promptScan struct {
	prompts int          // valid prompts
	turns   int          // their turns to generate with --turns all (TurnSlots)
	invalid int          // records that are not valid prompts
	unit    string       // "line" or "row"
	longest promptSize   // the longest valid prompt
	over    int          // prompts longer than the limit
	named   []promptSize // the first few of them, in file order
	err     error
}

// scanPrompts reads the prompts file at path record by record, as opts
// say (the run's turns mode), and compares every valid prompt's estimated
// length with limit. It stops early when ctx ends.
func scanPrompts(ctx context.Context, path string, limit int, opts dataset.ParseOptions) promptScan {
	var sc promptScan
	rd, err := dataset.Open(path, opts)
	if err != nil {
		sc.err = err
		return sc
	}
	defer rd.Close()
	sc.unit = rd.Unit()
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return sc
		}
		if err != nil {
			sc.err = err
			return sc
		}
		if rec.N%1024 == 0 && ctx.Err() != nil {
			sc.err = fmt.Errorf("stopped at %s %d: %w", rd.Unit(), rec.N, ctx.Err())
			return sc
		}
		if rec.Err != nil {
			sc.invalid++
			continue
		}
		sc.prompts++
		if opts.Turns == schema.TurnsAll {
			sc.turns += schema.TurnSlots(rec.Line.Messages)
		} else {
			sc.turns++
		}
		p := promptSize{unit: rd.Unit(), line: rec.N, id: rec.Line.ID, tokens: estimateTokens(rec.Line.Messages)}
		if p.tokens > sc.longest.tokens {
			sc.longest = p
		}
		if p.tokens > limit {
			sc.over++
			if len(sc.named) < maxNamed {
				sc.named = append(sc.named, p)
			}
		}
	}
}

// checkContextLength compares every prompt of the prompts file, with the
// run's max_tokens added, against the model's max_model_len. A prompt
// that does not fit is refused by the backend (400) and dead-lettered
// when a worker reaches it, however late in the run that is.
func checkContextLength(ctx context.Context, s *session) Result {
	if s.extraction() != nil {
		return skip("a hidden-states run: the producer refuses samples longer than the context")
	}
	if s.cfg.PromptsFile == "" {
		return skip("no prompts file given (--prompts)")
	}
	model, _, known := s.runModel()
	card, served := s.servedModel(model)
	var why string
	switch {
	case !s.listed:
		why = "no max_model_len: no model list from the backend (see model)"
	case !known:
		why = fmt.Sprintf("no run manifest, and the backend serves %d models: which one is unknown", len(s.models))
	case !served:
		why = fmt.Sprintf("the backend does not serve %q (see model)", model)
	case card.MaxModelLen <= 0:
		why = fmt.Sprintf("the backend does not report max_model_len for %q", model)
	}
	if why != "" {
		// The prompts are still counted, for the disk and store checks.
		if sc, err := await(ctx, func() promptScan { return scanPrompts(ctx, s.cfg.PromptsFile, math.MaxInt, s.parseOptions(model)) }); err == nil && sc.err == nil {
			s.prompts, s.turns = sc.prompts, sc.turns
			why += fmt.Sprintf("; %d prompts counted", sc.prompts)
		}
		return skip("%s", why)
	}
	maxLen, maxTokens := card.MaxModelLen, s.maxTokens()
	answer := fmt.Sprintf("max_tokens %d", maxTokens)
	limit := maxLen - maxTokens
	if maxTokens == 0 {
		// The answer may use what the prompt leaves, but needs a token.
		answer, limit = "max_tokens unset", maxLen-1
	}
	if limit <= 0 {
		return fail("produce the prompts as a new run with a smaller --max-tokens",
			"%s leaves no room for a prompt in max_model_len %d", answer, maxLen)
	}

	path := s.cfg.PromptsFile
	opts := s.parseOptions(model)
	sc, err := await(ctx, func() promptScan { return scanPrompts(ctx, path, limit, opts) })
	if err == nil {
		err = sc.err
	}
	if err != nil {
		return fail("check --prompts", "read prompts file %s: %v", s.cfg.PromptsFile, err)
	}
	s.prompts, s.turns = sc.prompts, sc.turns
	file := filepath.Base(s.cfg.PromptsFile)
	notes := ""
	if sc.invalid > 0 {
		notes = fmt.Sprintf("; %s not valid prompts (aerie produce --dry-run lists them)", plural(sc.invalid, sc.unit))
	}
	if opts.Turns == schema.TurnsAll {
		// The input's answers are not sent: the model's own take their
		// place, each at most max_tokens long.
		notes += "; with --turns all the earlier answers the model generates add to the later turns' prompts"
	}
	if sc.prompts == 0 {
		return warn("check --prompts", "%s holds no valid prompt%s", file, notes)
	}
	if sc.over > 0 {
		named := make([]string, len(sc.named))
		for i, p := range sc.named {
			named[i] = p.String()
		}
		more := ""
		if sc.over > len(sc.named) {
			more = fmt.Sprintf(" and %d more", sc.over-len(sc.named))
		}
		return fail("shorten or remove those prompts, produce with a smaller --max-tokens (a new run), or serve the model with a larger --max-model-len",
			"%d of %d prompts in %s do not fit %q: %s%s (estimate: bytes/4) + %s > max_model_len %d%s",
			sc.over, sc.prompts, file, model, strings.Join(named, "; "), more, answer, maxLen, notes)
	}
	fits := fmt.Sprintf("%d prompts in %s fit %q: the longest, %s (estimate: bytes/4), + %s <= max_model_len %d",
		sc.prompts, file, model, sc.longest, answer, maxLen)
	if maxTokens > 0 && float64(sc.longest.tokens+maxTokens) > nearLimit*float64(maxLen) {
		return warn("the estimate can be low for text other than English or code: count the longest prompt's tokens with the model's tokenizer",
			"%s, within %.0f%% of the limit%s", fits, (1-nearLimit)*100, notes)
	}
	return pass("%s%s", fits, notes)
}

// parseOptions reads the prompts file as the run will: for model, in the
// run's turns mode.
func (s *session) parseOptions(model string) dataset.ParseOptions {
	opts := dataset.ParseOptions{Model: model}
	if s.turnsAll() {
		opts.Turns = schema.TurnsAll
	}
	return opts
}

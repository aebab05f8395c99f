package export

import (
	"crypto/sha256"
	"fmt"
	"math/bits"
	"sort"
	"strings"
	"unicode"

	"github.com/go-json-experiment/json/jsontext"
)

// Summary is what an export read, wrote and left out, and what the
// consumer of the file needs to read it as intended. It is printed for a
// person (String) and written as JSON beside the output.
type Summary struct {
	Format string `json:"format"`
	Run    string `json:"run"`
	Out    string `json:"out,omitempty"`
	// Model is the run's model: its manifest's, or the first row's.
	Model string `json:"model,omitempty"`
	// LinesRead counts the completions.jsonl lines read: one per
	// completed unit.
	LinesRead int `json:"lines_read"`
	// RowsWritten counts the rows written: one per line, or with
	// FormatSpeculators one per generated turn; with FormatOpenAIBatch
	// failed units too (Failed of them).
	RowsWritten int `json:"rows_written"`
	Failed      int `json:"failed_rows,omitempty"`
	// Drop lists the --drop filters in force.
	Drop []string `json:"drop"`
	// Dropped counts the rows left out, by filter or reason.
	Dropped map[string]int `json:"dropped"`
	// Of the rows written: those holding an assistant turn the target
	// did not write, those with a system message, and those with
	// reasoning on a trained turn.
	NonTargetRows int `json:"rows_with_non_target_turns"`
	SystemRows    int `json:"rows_with_system_message"`
	ReasoningRows int `json:"rows_with_reasoning"`
	// MultiTurnReasoningRows counts rows training more than one turn
	// with reasoning: chat templates that render reasoning on the last
	// turn alone drop it from the earlier ones.
	MultiTurnReasoningRows int `json:"rows_with_reasoning_on_several_turns"`
	// EmptyContentRows counts rows with a trained turn whose content is
	// empty: SpecForge's validator rejects them.
	EmptyContentRows int `json:"rows_with_empty_content"`
	// Simulated counts the lines read that came from aerie's simulator.
	Simulated int `json:"simulated_rows"`
	// Length is the written rows' length in tokens, as the backend
	// counted them.
	Length LengthStats `json:"length_tokens"`
	// MaxLength is --max-length; OverMaxLength counts the rows written
	// that are longer, which the trainer will cut.
	MaxLength     int `json:"max_length,omitempty"`
	OverMaxLength int `json:"rows_over_max_length,omitempty"`
	// TokenCountMismatch counts FormatSpeculators rows whose answer's
	// token ids are not as many as its usage says.
	TokenCountMismatch int `json:"token_count_mismatch,omitempty"`
	// ReasoningLost counts, with FormatText, the rows whose rendered
	// text does not hold the answer's reasoning although the answer had
	// one: the chat template dropped it.
	ReasoningLost int `json:"reasoning_lost,omitempty"`
	// TemplateError is the first chat template error, when a row was
	// left out for one.
	TemplateError string `json:"chat_template_error,omitempty"`
	// Shards are FormatParquet's files, relative to its directory.
	Shards []string `json:"shards,omitempty"`
	// Settings are what the consumer needs set to read the file as
	// intended; Commands run it.
	Settings []Setting `json:"trainer_settings,omitempty"`
	Commands []Command `json:"commands,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
}

// LengthStats are row lengths in tokens: P50 and P99 to within 1.6 %
// (rounded up), Max exact.
type LengthStats struct {
	P50 int `json:"p50"`
	P99 int `json:"p99"`
	Max int `json:"max"`
}

// Setting is one setting of a consumer, and why this file needs it.
type Setting struct {
	Consumer string `json:"consumer"`
	Name     string `json:"name"`
	Value    string `json:"value"`
	Why      string `json:"why"`
}

// Command is a command of a consumer that reads the file.
type Command struct {
	Consumer string `json:"consumer"`
	Command  string `json:"command"`
}

func newSummary(opts Options) Summary {
	s := Summary{Format: opts.Format, Run: opts.Run, Out: opts.Out, Dropped: map[string]int{}, MaxLength: opts.MaxLength}
	d := opts.drops()
	for _, f := range Filters {
		if d[f] {
			s.Drop = append(s.Drop, f)
		}
	}
	if s.Drop == nil {
		s.Drop = []string{}
	}
	return s
}

// String is the summary for a person: what was written and left out,
// then the consumer's settings, commands and warnings, a line each.
func (s Summary) String() string {
	var b strings.Builder
	rows := "rows"
	if s.RowsWritten == 1 {
		rows = "row"
	}
	fmt.Fprintf(&b, "%d %s written (%s) from %d lines", s.RowsWritten, rows, s.Format, s.LinesRead)
	if s.Failed > 0 {
		fmt.Fprintf(&b, ", %d of them failed units", s.Failed)
	}
	total := 0
	var reasons []string
	for r, n := range s.Dropped {
		if n > 0 {
			reasons = append(reasons, fmt.Sprintf("%d %s", n, r))
			total += n
		}
	}
	if total == 0 {
		b.WriteString("; none dropped")
	} else {
		sort.Strings(reasons)
		fmt.Fprintf(&b, "; %d dropped: %s", total, strings.Join(reasons, ", "))
	}
	if len(s.Drop) > 0 {
		fmt.Fprintf(&b, " (--drop %s)", strings.Join(s.Drop, ","))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  rows written: %d with reasoning, %d with a system message, %d with assistant turns the target did not write\n",
		s.ReasoningRows, s.SystemRows, s.NonTargetRows)
	if s.RowsWritten > 0 {
		fmt.Fprintf(&b, "  length in tokens: p50 %d, p99 %d, max %d", s.Length.P50, s.Length.P99, s.Length.Max)
		if s.MaxLength > 0 {
			fmt.Fprintf(&b, "; %d rows longer than --max-length %d will be cut by the trainer", s.OverMaxLength, s.MaxLength)
		}
		b.WriteString("\n")
	}
	if s.Simulated > 0 {
		fmt.Fprintf(&b, "  SIMULATED: %d of the lines read are answers of aerie's built-in simulator, not of a model\n", s.Simulated)
	}
	for _, st := range s.Settings {
		fmt.Fprintf(&b, "  %s setting: %s = %s (%s)\n", st.Consumer, st.Name, st.Value, st.Why)
	}
	for _, c := range s.Commands {
		fmt.Fprintf(&b, "  %s: %s\n", c.Consumer, c.Command)
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(&b, "  warning: %s\n", w)
	}
	return strings.TrimRight(b.String(), "\n")
}

// exportStats gathers what the summary says of the rows written.
type exportStats struct {
	lengths histogram
	// systemKept is false when the rows written hold no system message
	// whatever the lines had (FormatShareGPT with --system drop or merge).
	systemKept bool
}

func newExportStats(opts Options) *exportStats {
	return &exportStats{systemKept: opts.Format != FormatShareGPT || opts.System == "" || opts.System == SystemKeep}
}

// written notes a row written: the conversation (tk -1) or its turn tk.
func (st *exportStats) written(r *exportRow, tk, length int, s *Summary) {
	st.lengths.add(length)
	if s.Model == "" {
		s.Model = r.model
	}
	first, end := 0, len(r.turns)
	if tk >= 0 {
		first, end = tk, tk+1
	}
	if hasNonTarget(r.turns[:end]) {
		s.NonTargetRows++
	}
	for _, t := range r.turns[:end] {
		if t.role == "system" && st.systemKept {
			s.SystemRows++
			break
		}
	}
	withReasoning, emptyContent := 0, false
	for _, t := range r.turns[first:end] {
		if t.generated && !t.reasoningEmpty {
			withReasoning++
		}
		emptyContent = emptyContent || (t.generated && t.contentEmpty)
	}
	if emptyContent {
		s.EmptyContentRows++
	}
	if withReasoning > 0 {
		s.ReasoningRows++
	}
	if withReasoning > 1 {
		s.MultiTurnReasoningRows++
	}
}

func (st *exportStats) finish(s *Summary) {
	s.Length = LengthStats{P50: st.lengths.quantile(0.5), P99: st.lengths.quantile(0.99), Max: st.lengths.max}
}

// histogram counts values in log-linear buckets: exact below 128, then
// 64 buckets per power of two, so a quantile is within 1/64 of the true
// one in a fixed 4 KiB, whatever the number of rows.
type histogram struct {
	counts [64 * 58]int64
	n      int64
	max    int
}

const histSub = 64

func histBucket(v int) int {
	if v < 2*histSub {
		return v
	}
	e := bits.Len(uint(v)) - 7 // v >> e is in [64, 128)
	return (e+1)*histSub + (v>>e - histSub)
}

// histUpper is the largest value of bucket i.
func histUpper(i int) int {
	if i < 2*histSub {
		return i
	}
	e := i/histSub - 1
	m := i%histSub + histSub
	return (m+1)<<e - 1
}

func (h *histogram) add(v int) {
	v = max(v, 0)
	i := min(histBucket(v), len(h.counts)-1)
	h.counts[i]++
	h.n++
	h.max = max(h.max, v)
}

// quantile is the upper bound of the bucket holding quantile q, at
// most the largest value seen.
func (h *histogram) quantile(q float64) int {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n-1)) + 1
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histUpper(i), h.max)
		}
	}
	return h.max
}

// digest is the --dedupe key of a row: a hash of its prompt (every
// message that is not a generated answer, role and text) or its answers
// (every generated turn's reasoning and content), each text normalized:
// unescaped, white space runs made one space, trimmed. Exact match
// after that; no case folding, no fuzzy match.
func digest(r *exportRow, key string) [16]byte {
	h := sha256.New()
	var buf []byte
	for _, t := range r.turns {
		if t.generated != (key == DedupeAnswer) {
			continue
		}
		if key == DedupePrompt {
			h.Write([]byte(t.role))
			h.Write([]byte{0})
		} else {
			buf = normalizedText(buf[:0], r.raw(t.reasoning))
			h.Write(buf)
			h.Write([]byte{0})
		}
		buf = normalizedText(buf[:0], r.raw(t.content))
		h.Write(buf)
		h.Write([]byte{1})
	}
	var d [16]byte
	copy(d[:], h.Sum(nil))
	return d
}

// normalizedText appends the text of a raw JSON string with runs of
// white space made one space and the ends trimmed.
func normalizedText(dst, raw []byte) []byte {
	if len(raw) == 0 {
		return dst
	}
	s, err := jsontext.AppendUnquote(nil, raw)
	if err != nil {
		return append(dst, raw...)
	}
	space := false
	for _, c := range string(s) {
		if unicode.IsSpace(c) {
			space = true
			continue
		}
		if space && len(dst) > 0 {
			dst = append(dst, ' ')
		}
		space = false
		dst = append(dst, string(c)...)
	}
	return dst
}

// thinkingTemplate is SpecForge's chat template (specforge/data/template.py,
// TEMPLATE_REGISTRY) whose parser_type is "thinking" for model, or "" when
// none is known for it.
func thinkingTemplate(model string) string {
	m := strings.ToLower(model)
	for _, c := range []struct{ part, template string }{
		{"kimi-k3", "kimi-k3-thinking"},
		{"kimi", "kimi-k2-thinking"},
		{"qwen3.5", "qwen3.5"},
		{"qwen3-next", "qwen3-next-thinking"},
		{"qwen3", "qwen3-thinking"},
		{"deepseek-v3.2", "deepseek-v32"},
	} {
		if strings.Contains(m, c.part) {
			return c.template
		}
	}
	return ""
}

// roundLength is a sequence length at or above n: the next multiple of
// 1024.
func roundLength(n int) int {
	if n <= 0 {
		return 2048
	}
	return (n + 1023) / 1024 * 1024
}

// advise fills in the consumer's settings, commands and warnings.
func advise(s *Summary, opts Options) {
	out := opts.Out
	if out == "" || out == "-" {
		out = "FILE"
	}
	if opts.Manifest != nil && opts.Manifest.Model != "" {
		s.Model = opts.Manifest.Model
	}
	model := s.Model
	if model == "" {
		model = "MODEL"
	}
	length := max(roundLength(s.Length.P99), opts.MaxLength)
	lengthWhy := fmt.Sprintf("at or above the rows' p99 of %d tokens; shorter cuts rows", s.Length.P99)
	if opts.MaxLength > 0 {
		length = opts.MaxLength
		lengthWhy = fmt.Sprintf("the --max-length the rows were checked against (p99 %d tokens)", s.Length.P99)
	}
	conversationRows := opts.Format == FormatSpecForge || opts.Format == FormatParquet || opts.Format == FormatShareGPT || opts.Format == FormatText
	var template string
	if conversationRows {
		template = thinkingTemplate(model)
		if s.ReasoningRows > 0 && opts.Format != FormatShareGPT {
			v := template
			if v == "" {
				v = "a template of parser_type thinking for " + model
			}
			s.Settings = append(s.Settings, Setting{"SpecForge", "data.chat_template", v,
				"rows carry reasoning_content, which only a thinking template renders; the default llama3 drops it"})
		}
		if s.NonTargetRows > 0 {
			s.Settings = append(s.Settings, Setting{"SpecForge", "data.train_only_last_turn", "true",
				fmt.Sprintf("%d rows hold assistant turns the target did not write, which SpecForge trains by default", s.NonTargetRows)})
		}
		s.Settings = append(s.Settings, Setting{"SpecForge", "data.max_length", fmt.Sprint(length), lengthWhy})
	}
	specforgeTrain := func(data string) string {
		c := "specforge train -c RECIPE.yaml " + data
		for _, st := range s.Settings {
			if st.Consumer == "SpecForge" && strings.HasPrefix(st.Name, "data.") && !strings.Contains(st.Value, " ") {
				c += " " + st.Name + "=" + st.Value
			}
		}
		return c
	}
	switch opts.Format {
	case FormatSpecForge:
		validate := "python scripts/validate_regenerated_data.py --data-path " + out
		if s.ReasoningRows == s.RowsWritten && s.NonTargetRows == 0 && s.RowsWritten > 0 {
			validate += " --expect-reasoning"
		}
		s.Commands = append(s.Commands, Command{"SpecForge", validate}, Command{"SpecForge", specforgeTrain("data.train_data_path=" + out)})
	case FormatText:
		s.Commands = append(s.Commands, Command{"SpecForge", specforgeTrain("data.train_data_path=" + out + " data.is_preformatted=true")})
	case FormatShareGPT:
		s.Commands = append(s.Commands, Command{"SpecForge", specforgeTrain("data.train_data_path=" + out)})
	case FormatParquet:
		s.Commands = append(s.Commands,
			Command{"datasets", fmt.Sprintf("python -c 'import datasets; print(datasets.load_dataset(\"parquet\", data_dir=\"%s\"))'", out)},
			Command{"huggingface-cli", "huggingface-cli upload ORG/NAME " + out + " --repo-type dataset"})
	case FormatSpeculators:
		s.Settings = append(s.Settings,
			Setting{"speculators", "--seq-length", fmt.Sprint(length), lengthWhy},
			Setting{"SpecForge", "data.max_length", fmt.Sprint(length), lengthWhy})
		s.Commands = append(s.Commands,
			Command{"speculators", fmt.Sprintf("python scripts/prepare_data.py --model %s --data %s --output ./prepared --seq-length %d", model, out, length)},
			Command{"SpecForge", fmt.Sprintf("specforge train -c RECIPE.yaml data.prompts_path=%s data.max_length=%d", out, length)})
	}
	if s.Simulated > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d lines are answers of aerie's built-in simulator (--allow-simulated): rehearsal data, not for training a drafter", s.Simulated))
	}
	if s.NonTargetRows > 0 && opts.Format != FormatOpenAIBatch {
		w := fmt.Sprintf("%d rows hold assistant turns from the prompts file, not from the target: ", s.NonTargetRows)
		switch opts.Format {
		case FormatSpeculators:
			w += "they are context only (loss 0) in these rows"
		default:
			w += "SpecForge trains them unless data.train_only_last_turn=true, and its validator with --expect-reasoning rejects them; --drop non-target-turns leaves them out, or regenerate with --turns all"
		}
		s.Warnings = append(s.Warnings, w)
	}
	if s.SystemRows > 0 && opts.Format == FormatShareGPT && opts.System != SystemDrop && opts.System != SystemMerge {
		s.Warnings = append(s.Warnings, fmt.Sprintf(`%d rows hold a system message ("from": "system"): the original EAGLE-3 training script (eagle/traineagle3/cnets.py) maps only human and gpt and stops on it, and SpecForge's prepare_data.py --dataset sharegpt drops it; --system merge puts it in front of the first human turn`, s.SystemRows))
	}
	if s.MultiTurnReasoningRows > 0 && conversationRows && opts.Format != FormatShareGPT {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d rows train reasoning on more than one turn: thinking chat templates commonly render reasoning on the last assistant turn only; the speculators export (one row per turn, exact token ids, via data.prompts_path) trains each turn's reasoning as generated", s.MultiTurnReasoningRows))
	}
	if s.ReasoningRows > 0 && opts.Format == FormatText && s.ReasoningLost > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("in %d of %d rows the chat template dropped the answer's reasoning: a drafter trained on them never sees the thinking; use --format speculators (token ids) or specforge with a thinking template", s.ReasoningLost, s.RowsWritten))
	}
	if s.OverMaxLength > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d rows are longer than --max-length %d: the trainer cuts them there", s.OverMaxLength, opts.MaxLength))
	}
	if n := s.Dropped[DroppedPromptTooLong]; n > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d rows dropped whose prompt alone reaches --max-length %d: the trainer would have dropped them without a word", n, opts.MaxLength))
	}
	if s.TokenCountMismatch > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d rows have a different number of answer token ids than their usage's completion_tokens", s.TokenCountMismatch))
	}
	if (opts.Format == FormatSpecForge || opts.Format == FormatParquet) && s.EmptyContentRows > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d rows have an answer with no content (reasoning only, or nothing): SpecForge's validator rejects them (--drop reasoning-only,empty leaves them out)", s.EmptyContentRows))
	}
	if opts.Format == FormatSpecForge && s.ReasoningRows > 0 && s.ReasoningRows < s.RowsWritten {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d of %d rows have a trained turn without reasoning: SpecForge's validator with --expect-reasoning rejects them (--drop no-reasoning leaves them out)", s.RowsWritten-s.ReasoningRows, s.RowsWritten))
	}
}

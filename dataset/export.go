package dataset

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/schema"
)

// Export formats: the shapes trainers and batch tools read.
const (
	// FormatSpecForge is SpecForge's conversation shape: {"id",
	// "conversations": [{"role", "content"}, ..., {"role": "assistant",
	// "content", "reasoning_content"}]}, every generated turn with its
	// reasoning.
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
	// FormatSpeculators is {"id", "input_ids", "loss_mask", "metadata"}
	// from the token ids a run stored with --return-token-ids.
	FormatSpeculators = "speculators"
)

// Formats lists every export format.
var Formats = []string{FormatSpecForge, FormatShareGPT, FormatOpenAIBatch, FormatText, FormatSpeculators}

// Default think tags of FormatShareGPT.
const (
	DefaultThinkOpen  = "<think>"
	DefaultThinkClose = "</think>"
)

// Why a line is left out of an export (Summary.LeftOut).
const (
	LeftOutTruncated     = "truncated"
	LeftOutNoTokenIDs    = "no token ids"
	LeftOutTemplateError = "chat template error"
)

// ExportOptions say how lines are exported. The zero value is not
// usable: Format is required.
type ExportOptions struct {
	Format string
	// Run names the run; FormatOpenAIBatch derives its request ids from
	// it and the custom_id, so that an export made twice is the same.
	Run string
	// IncludeTruncated keeps answers cut at max_tokens, which are left
	// out by default: a drafter should not learn to stop mid-sentence.
	IncludeTruncated bool
	// ThinkOpen and ThinkClose wrap the reasoning in FormatShareGPT;
	// empty means DefaultThinkOpen and DefaultThinkClose.
	ThinkOpen, ThinkClose string
	// ChatTemplate renders FormatText; required for it.
	ChatTemplate *ChatTemplate
}

// Validate checks the options' values.
func (o ExportOptions) Validate() error {
	if !slices.Contains(Formats, o.Format) {
		return fmt.Errorf("format %q: use one of %s", o.Format, strings.Join(Formats, ", "))
	}
	if o.Format == FormatText && o.ChatTemplate == nil {
		return errors.New("format text needs --chat-template: the model's tokenizer_config.json or a .jinja file")
	}
	if o.Format != FormatText && o.ChatTemplate != nil {
		return fmt.Errorf("--chat-template is for format text, not %s", o.Format)
	}
	return nil
}

// Summary is what an export wrote and left out.
type Summary struct {
	Format string
	// Written counts the lines written: completed units, and with
	// FormatOpenAIBatch failed ones too (Failed of them).
	Written int
	Failed  int
	// LeftOut counts the completed units not written, by reason.
	LeftOut map[string]int
	// ReasoningLost counts, with FormatText, the lines written whose
	// rendered text does not hold the answer's reasoning although the
	// answer had one: the chat template dropped it.
	ReasoningLost int
	// TemplateError is the first chat template error, when any line was
	// left out for one.
	TemplateError string
}

// String is the summary as one sentence per fact, for a person.
func (s Summary) String() string {
	var b strings.Builder
	lines := "lines"
	if s.Written == 1 {
		lines = "line"
	}
	fmt.Fprintf(&b, "%d %s written (%s)", s.Written, lines, s.Format)
	if s.Failed > 0 {
		fmt.Fprintf(&b, ", %d of them failed units", s.Failed)
	}
	if len(s.LeftOut) == 0 {
		b.WriteString("; none left out")
	} else {
		reasons := make([]string, 0, len(s.LeftOut))
		total := 0
		for r, n := range s.LeftOut {
			reasons = append(reasons, fmt.Sprintf("%d %s", n, r))
			total += n
		}
		sort.Strings(reasons)
		fmt.Fprintf(&b, "; %d left out: %s", total, strings.Join(reasons, ", "))
		if s.LeftOut[LeftOutTruncated] > 0 {
			b.WriteString(" (--include-truncated keeps truncated answers)")
		}
	}
	if s.TemplateError != "" {
		fmt.Fprintf(&b, "; first chat template error: %s", s.TemplateError)
	}
	return b.String()
}

// ExportID is the id a unit has in an export: the prompt's id for sample
// 0, and "<id>#<k>" for sample k, so that every line of a run with
// --samples has its own id.
func ExportID(u schema.Unit) string {
	if u.Sample == 0 {
		return u.ID
	}
	return u.ID + "#" + strconv.Itoa(u.Sample)
}

// Exporter writes the lines of one export. Give it every completed line
// (Completion), then, for FormatOpenAIBatch, every failed one (Failed),
// then Close.
type Exporter struct {
	opts    ExportOptions
	w       *bufio.Writer
	enc     *json.Encoder
	sum     Summary
	done    map[string]bool // completed units, for Failed
	withIDs int             // lines that had token ids
}

// NewExporter returns an exporter writing to w.
func NewExporter(w io.Writer, opts ExportOptions) (*Exporter, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.ThinkOpen == "" {
		opts.ThinkOpen = DefaultThinkOpen
	}
	if opts.ThinkClose == "" {
		opts.ThinkClose = DefaultThinkClose
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &Exporter{opts: opts, w: bw, enc: enc, sum: Summary{Format: opts.Format, LeftOut: map[string]int{}}, done: map[string]bool{}}, nil
}

// Completion writes the line of a completed unit, or counts why it is
// left out.
func (e *Exporter) Completion(l *CompletionLine) error {
	if e.opts.Format == FormatOpenAIBatch {
		e.done[l.Unit().Key()] = true
	}
	if l.IsTruncated() && !e.opts.IncludeTruncated {
		e.sum.LeftOut[LeftOutTruncated]++
		return nil
	}
	var v any
	switch e.opts.Format {
	case FormatSpecForge:
		v = specForgeLine(l)
	case FormatShareGPT:
		v = shareGPTLine(l, e.opts.ThinkOpen, e.opts.ThinkClose)
	case FormatOpenAIBatch:
		v = batchLine(l, e.opts.Run)
	case FormatSpeculators:
		if len(l.PromptTokenIDs) == 0 || len(l.TokenIDs) == 0 {
			e.sum.LeftOut[LeftOutNoTokenIDs]++
			return nil
		}
		e.withIDs++
		v = speculatorsLine(l)
	case FormatText:
		text, err := e.opts.ChatTemplate.Render(templateMessages(l))
		if err != nil {
			e.sum.LeftOut[LeftOutTemplateError]++
			if e.sum.TemplateError == "" {
				e.sum.TemplateError = fmt.Sprintf("line %s: %v", ExportID(l.Unit()), err)
			}
			return nil
		}
		if l.Reasoning != "" && !strings.Contains(text, l.Reasoning) {
			e.sum.ReasoningLost++
		}
		v = textLine{ID: ExportID(l.Unit()), Text: text}
	}
	if err := e.enc.Encode(v); err != nil {
		return fmt.Errorf("write line %s: %w", ExportID(l.Unit()), err)
	}
	e.sum.Written++
	return nil
}

// Failed writes, with FormatOpenAIBatch, the error line of a failed
// unit, unless the unit was given to Completion too (a failure that a
// replay later answered: the answer wins). Other formats have no shape
// for a failure and leave it out.
func (e *Exporter) Failed(l *FailedLine) error {
	if e.opts.Format != FormatOpenAIBatch || e.done[l.Unit().Key()] {
		return nil
	}
	if err := e.enc.Encode(batchErrorLine(l, e.opts.Run)); err != nil {
		return fmt.Errorf("write line %s: %w", ExportID(l.Unit()), err)
	}
	e.sum.Written++
	e.sum.Failed++
	return nil
}

// Close flushes what is buffered and returns the summary. With
// FormatSpeculators, a run none of whose answers has token ids is an
// error: the run was not produced with --return-token-ids.
func (e *Exporter) Close() (Summary, error) {
	if e.opts.Format == FormatSpeculators && e.withIDs == 0 && e.sum.LeftOut[LeftOutNoTokenIDs] > 0 {
		return e.sum, fmt.Errorf("no answer of run %s has token ids, which format speculators is made of: produce the run with --return-token-ids (or export another format)", e.opts.Run)
	}
	if err := e.w.Flush(); err != nil {
		return e.sum, fmt.Errorf("write: %w", err)
	}
	return e.sum, nil
}

// Source is where an export reads a run's lines: its files, or its
// streams.
type Source interface {
	// Completions calls fn with every completed unit's line.
	Completions(ctx context.Context, fn func(*CompletionLine) error) error
	// Failed calls fn with every failed unit's line.
	Failed(ctx context.Context, fn func(*FailedLine) error) error
}

// Files is the Source of a run's output directory (<data-dir>/<run>).
// A missing failed.jsonl is an empty one; a missing completions.jsonl is
// an error.
type Files string

// Completions reads completions.jsonl.
func (dir Files) Completions(ctx context.Context, fn func(*CompletionLine) error) error {
	path := filepath.Join(string(dir), CompletionsFile)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w (is --data-dir right, and has the run's aggregator written it? --from-stream rebuilds it from NATS)", err)
	}
	defer f.Close()
	return ReadCompletions(f, path, func(l *CompletionLine) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(l)
	})
}

// Failed reads failed.jsonl.
func (dir Files) Failed(ctx context.Context, fn func(*FailedLine) error) error {
	path := filepath.Join(string(dir), FailedFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return ReadFailed(f, path, func(l *FailedLine) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(l)
	})
}

// Export writes every line of src to w as opts say and returns the
// summary. Failed units are read only for FormatOpenAIBatch.
func Export(ctx context.Context, src Source, w io.Writer, opts ExportOptions) (Summary, error) {
	e, err := NewExporter(w, opts)
	if err != nil {
		return Summary{}, err
	}
	if err := src.Completions(ctx, e.Completion); err != nil {
		return e.sum, err
	}
	if opts.Format == FormatOpenAIBatch {
		if err := src.Failed(ctx, e.Failed); err != nil {
			return e.sum, err
		}
	}
	return e.Close()
}

// WriteFileAtomic writes path through write: into a temporary file in
// path's directory, fsynced and renamed over path only when write
// returns nil. An export that fails or is interrupted leaves no file, or
// the one that was there, never half of one.
func WriteFileAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := fsmode.CreateTemp(path, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("create a file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// turn is one message of an exported conversation.
type turn struct {
	role, content, reasoning string
}

// conversation is the line's conversation with its answer appended:
// every message as sent for the last turn (with --turns all, the earlier
// answers with their reasoning), then the last answer.
func conversation(l *CompletionLine) []turn {
	c := make([]turn, 0, len(l.Messages)+1)
	for _, m := range l.Messages {
		c = append(c, turn{role: m.Role, content: m.Content, reasoning: m.Reasoning})
	}
	return append(c, turn{role: "assistant", content: l.Content, reasoning: l.Reasoning})
}

type specForgeMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is written on every assistant turn, empty when it
	// had no reasoning (an input turn sent as it was).
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

type conversationLine[M any] struct {
	ID            string `json:"id"`
	Conversations []M    `json:"conversations"`
}

func specForgeLine(l *CompletionLine) conversationLine[specForgeMessage] {
	conv := conversation(l)
	out := conversationLine[specForgeMessage]{ID: ExportID(l.Unit()), Conversations: make([]specForgeMessage, len(conv))}
	for i, t := range conv {
		out.Conversations[i] = specForgeMessage{Role: t.role, Content: t.content}
		if t.role == "assistant" {
			out.Conversations[i].ReasoningContent = &t.reasoning
		}
	}
	return out
}

type shareGPTMessage struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

// shareGPTFrom is ShareGPT's name of a role; a role it has no name for
// (a tool's turn) keeps its own.
func shareGPTFrom(role string) string {
	switch role {
	case "user":
		return "human"
	case "assistant":
		return "gpt"
	}
	return role
}

// inlineReasoning is an answer with its reasoning before it between the
// think tags, as reasoning models write it: "<think>\nR\n</think>\n\nC";
// an answer without reasoning is its content alone.
func inlineReasoning(reasoning, content, open, closeTag string) string {
	if reasoning == "" {
		return content
	}
	return open + "\n" + reasoning + "\n" + closeTag + "\n\n" + content
}

func shareGPTLine(l *CompletionLine, open, closeTag string) conversationLine[shareGPTMessage] {
	conv := conversation(l)
	out := conversationLine[shareGPTMessage]{ID: ExportID(l.Unit()), Conversations: make([]shareGPTMessage, len(conv))}
	for i, t := range conv {
		v := t.content
		if t.role == "assistant" {
			v = inlineReasoning(t.reasoning, t.content, open, closeTag)
		}
		out.Conversations[i] = shareGPTMessage{From: shareGPTFrom(t.role), Value: v}
	}
	return out
}

// The OpenAI Batch output shapes, fields in the order of OpenAI's own
// example lines.
type batchLineJSON struct {
	ID       string         `json:"id"`
	CustomID string         `json:"custom_id"`
	Response *batchResponse `json:"response"`
	Error    *batchError    `json:"error"`
}

type batchResponse struct {
	StatusCode int            `json:"status_code"`
	RequestID  string         `json:"request_id"`
	Body       chatCompletion `json:"body"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   batchUsage   `json:"usage"`
}

type chatChoice struct {
	Index   int         `json:"index"`
	Message chatMessage `json:"message"`
	// Logprobs is always null: aerie does not ask for them.
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Reasoning is vLLM's name for the reasoning of an answer.
	Reasoning string `json:"reasoning"`
}

type batchUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type batchError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// batchHash is a stable identifier derived from the run and a custom_id,
// so that exporting a run twice gives the same file.
func batchHash(kind, run, customID string) string {
	h := sha256.New()
	h.Write([]byte("aerie/" + kind + "\x00" + run + "\x00" + customID))
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// batchLine is the Batch output line of a completed unit. Its usage is
// summed over the turns generated (one with --turns last).
func batchLine(l *CompletionLine, run string) batchLineJSON {
	id := ExportID(l.Unit())
	return batchLineJSON{
		ID: "batch_req_" + batchHash("batch", run, id), CustomID: id,
		Response: &batchResponse{
			StatusCode: 200, RequestID: "req_" + batchHash("request", run, id),
			Body: chatCompletion{
				ID: "chatcmpl-" + batchHash("completion", run, id), Object: "chat.completion",
				Created: l.FinishedAt.Unix(), Model: l.Model,
				Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: l.Content, Reasoning: l.Reasoning}, FinishReason: l.FinishReason}},
				Usage: batchUsage{PromptTokens: l.Usage.PromptTokens, CompletionTokens: l.Usage.CompletionTokens,
					TotalTokens: l.Usage.PromptTokens + l.Usage.CompletionTokens},
			},
		},
	}
}

// batchErrorLine is the Batch output line of a failed unit: its code is
// the backend's HTTP status when there was one, else aerie's reason
// (permanent, retries-exhausted, poison, truncated).
func batchErrorLine(l *FailedLine, run string) batchLineJSON {
	id := ExportID(l.Unit())
	code := l.Reason
	if l.Status > 0 {
		code = strconv.Itoa(l.Status)
	}
	msg := l.Error
	if msg == "" {
		msg = l.Reason
	}
	return batchLineJSON{ID: "batch_req_" + batchHash("batch", run, id), CustomID: id, Error: &batchError{Code: code, Message: msg}}
}

type speculatorsJSON struct {
	ID       string              `json:"id"`
	InputIDs []int               `json:"input_ids"`
	LossMask []int               `json:"loss_mask"`
	Metadata speculatorsMetadata `json:"metadata"`
}

type speculatorsMetadata struct {
	FinishReason string       `json:"finish_reason"`
	Usage        schema.Usage `json:"usage"`
}

// speculatorsLine is the last turn's prompt and answer as token ids, the
// loss on the answer only: the earlier turns are in the prompt, as
// context.
func speculatorsLine(l *CompletionLine) speculatorsJSON {
	ids := make([]int, 0, len(l.PromptTokenIDs)+len(l.TokenIDs))
	ids = append(append(ids, l.PromptTokenIDs...), l.TokenIDs...)
	mask := make([]int, len(ids))
	for i := len(l.PromptTokenIDs); i < len(mask); i++ {
		mask[i] = 1
	}
	return speculatorsJSON{ID: ExportID(l.Unit()), InputIDs: ids, LossMask: mask,
		Metadata: speculatorsMetadata{FinishReason: l.FinishReason, Usage: l.Usage}}
}

type textLine struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

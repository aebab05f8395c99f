package export

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// ID is the id a unit has in an export: the prompt's id for sample
// 0, and "<id>#<k>" for sample k, so that every line of a run with
// --samples has its own id.
func ID(u schema.Unit) string {
	if u.Sample == 0 {
		return u.ID
	}
	return u.ID + "#" + strconv.Itoa(u.Sample)
}

// turnID is the id of a generated turn's row in FormatSpeculators: the
// unit's export id for its last turn, "<id>:t<k>" for turn k (from 1)
// before it.
func turnID(u schema.Unit, k int, last bool) string {
	if last {
		return ID(u)
	}
	return ID(u) + ":t" + strconv.Itoa(k)
}

// ErrSimulated is returned, wrapped, when an export meets an answer of
// aerie's simulator without Options.AllowSimulated.
var ErrSimulated = errors.New("simulated answers")

// badLine is a completions.jsonl line the export cannot read; a Source
// of files says where it is, or leaves out a torn last line.
type badLine struct{ err error }

func (e badLine) Error() string { return e.err.Error() }
func (e badLine) Unwrap() error { return e.err }

// rowSink is where a Writer's rows go: JSON lines, or Parquet shards.
type rowSink interface {
	// row writes the row of a conversation, or of one of its turns (tk
	// from 0 for FormatSpeculators; -1 for the whole conversation).
	row(r *exportRow, tk int) error
	// failed writes a failed unit, for formats that have a shape for it.
	failed(l *dataset.FailedLine) error
	close() error
}

// Writer writes the rows of one export and keeps its summary. Give it
// every completions.jsonl line (Completion), then, for FormatOpenAIBatch,
// every failed unit (Failed), then Close. Its zero value is not usable:
// use NewWriter.
type Writer struct {
	opts  Options
	drops map[string]bool
	sink  rowSink
	dec   *rowDecoder
	row   exportRow
	sum   Summary
	stats *exportStats
	done  map[schema.Unit]bool // completed units, for Failed
	seen  map[[16]byte]bool    // --dedupe digests
}

// NewWriter returns a writer of JSON lines to w. It is for every format
// but FormatParquet, which writes a directory (see WriteParquet).
func NewWriter(w io.Writer, opts Options) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Format == FormatParquet {
		return nil, errors.New("format parquet writes a directory: use WriteParquet")
	}
	if opts.ThinkOpen == "" {
		opts.ThinkOpen = DefaultThinkOpen
	}
	if opts.ThinkClose == "" {
		opts.ThinkClose = DefaultThinkClose
	}
	e := newWriter(opts)
	e.sink = newJSONLSink(bufio.NewWriterSize(w, 1<<20), opts, &e.sum)
	return e, nil
}

func newWriter(opts Options) *Writer {
	e := &Writer{opts: opts, drops: opts.drops(), dec: newRowDecoder(opts.Format == FormatSpeculators),
		sum: newSummary(opts), stats: newExportStats(opts)}
	if opts.Format == FormatOpenAIBatch {
		e.done = map[schema.Unit]bool{}
	}
	if opts.Dedupe != "" {
		e.seen = map[[16]byte]bool{}
	}
	return e
}

// Completion reads one completions.jsonl line and writes its rows, or
// counts why they are left out. A line that cannot be read is returned
// as a badLine error; a simulated answer without AllowSimulated stops
// the export with ErrSimulated.
func (e *Writer) Completion(line []byte) error {
	r := &e.row
	if err := e.dec.decode(line, r); err != nil {
		return badLine{err}
	}
	e.sum.LinesRead++
	if r.simulated {
		if !e.opts.AllowSimulated {
			return fmt.Errorf("line %s is an answer of aerie's built-in simulator: %w are rehearsal data, not the model's; export a run of the real backend, or pass --allow-simulated to export them marked as simulated", ID(r.unit), ErrSimulated)
		}
		e.sum.Simulated++
	}
	if e.done != nil {
		e.done[r.unit] = true
	}
	if e.seen != nil {
		d := digest(r, e.opts.Dedupe)
		if e.seen[d] {
			e.drop(dedupeReason(e.opts.Dedupe), rowsOf(r, e.opts.Format))
			return nil
		}
		e.seen[d] = true
	}
	if e.opts.Format != FormatSpeculators {
		return e.emit(r, -1)
	}
	for k := range r.turns {
		if r.turns[k].generated {
			if err := e.emit(r, k); err != nil {
				return err
			}
		}
	}
	return nil
}

// rowsOf is how many rows a line makes in format.
func rowsOf(r *exportRow, format string) int {
	if format != FormatSpeculators {
		return 1
	}
	n := 0
	for _, t := range r.turns {
		if t.generated {
			n++
		}
	}
	return n
}

func dedupeReason(key string) string {
	if key == DedupePrompt {
		return DroppedDuplicatePrompt
	}
	return DroppedDuplicateAnswer
}

func (e *Writer) drop(reason string, n int) {
	e.sum.Dropped[reason] += n
}

// emit filters and writes the row of the conversation (tk -1) or of its
// generated turn tk.
func (e *Writer) emit(r *exportRow, tk int) error {
	if reason := e.filter(r, tk); reason != "" {
		e.drop(reason, 1)
		return nil
	}
	prompt, length := rowLength(r, tk)
	if e.opts.MaxLength > 0 && prompt >= e.opts.MaxLength {
		e.drop(DroppedPromptTooLong, 1)
		return nil
	}
	if e.opts.Format == FormatSpeculators {
		t := &r.turns[tk]
		if t.nPrompt == 0 || t.nTokens == 0 {
			e.drop(DroppedNoTokenIDs, 1)
			return nil
		}
		if t.nTokens != t.usage.CompletionTokens {
			e.sum.TokenCountMismatch++
		}
	}
	if err := e.sink.row(r, tk); err != nil {
		if errors.Is(err, errTemplate) {
			e.drop(DroppedTemplateError, 1)
			return nil
		}
		return fmt.Errorf("write row %s: %w", ID(r.unit), err)
	}
	e.sum.RowsWritten++
	e.stats.written(r, tk, length, &e.sum)
	if e.opts.MaxLength > 0 && length > e.opts.MaxLength {
		e.sum.OverMaxLength++
	}
	return nil
}

// filter names the first --drop filter that the row meets, or "".
func (e *Writer) filter(r *exportRow, tk int) string {
	// The turns a row trains: all generated ones of a conversation, or
	// the one turn of a FormatSpeculators row; its context: the turns
	// before.
	first, end := 0, len(r.turns)
	if tk >= 0 {
		first, end = tk, tk+1
	}
	for _, f := range Filters {
		if !e.drops[f] {
			continue
		}
		hit := false
		switch f {
		case DropTruncated:
			if tk < 0 || tk == len(r.turns)-1 {
				hit = r.isTruncated()
			} else {
				hit = r.turns[tk].finish == "length"
			}
		case DropNonTargetTurns:
			hit = hasNonTarget(r.turns[:end])
		default:
			for _, t := range r.turns[first:end] {
				if t.generated && meets(f, &t) {
					hit = true
					break
				}
			}
		}
		if hit {
			return f
		}
	}
	return ""
}

// meets reports whether a generated turn meets a per-turn filter.
func meets(filter string, t *exportTurn) bool {
	switch filter {
	case DropEmpty:
		return t.contentEmpty && t.reasoningEmpty
	case DropReasoningOnly:
		return t.contentEmpty && !t.reasoningEmpty
	case DropNoReasoning:
		return t.reasoningEmpty
	}
	return false
}

// hasNonTarget reports whether turns hold an assistant turn that the
// target did not generate.
func hasNonTarget(turns []exportTurn) bool {
	for _, t := range turns {
		if t.role == "assistant" && !t.generated {
			return true
		}
	}
	return false
}

// rowLength is a row's length in tokens as the backend counted them:
// prompt is the context before the first answer it trains, length the
// whole row (the last trained turn's prompt and answer).
func rowLength(r *exportRow, tk int) (prompt, length int) {
	if tk >= 0 {
		u := r.turns[tk].usage
		return u.PromptTokens, u.PromptTokens + u.CompletionTokens
	}
	for _, t := range r.turns {
		if t.generated {
			prompt = t.usage.PromptTokens
			break
		}
	}
	u := r.last().usage
	return prompt, u.PromptTokens + u.CompletionTokens
}

// Failed writes, with FormatOpenAIBatch, the error line of a failed
// unit, unless the unit was given to Completion too (a failure that a
// replay later answered: the answer wins). Other formats have no shape
// for a failure and leave it out.
func (e *Writer) Failed(l *dataset.FailedLine) error {
	if e.opts.Format != FormatOpenAIBatch || e.done[l.Unit()] {
		return nil
	}
	if err := e.sink.failed(l); err != nil {
		return fmt.Errorf("write line %s: %w", ID(l.Unit()), err)
	}
	e.sum.RowsWritten++
	e.sum.Failed++
	return nil
}

// Close flushes what is buffered and returns the summary, with the
// consumer's settings and commands filled in. With FormatSpeculators an
// export that found no token ids at all is an error: the run was not
// produced with --return-token-ids, or its backend did not return them.
func (e *Writer) Close() (Summary, error) {
	e.stats.finish(&e.sum)
	if e.opts.Format == FormatSpeculators && e.sum.RowsWritten == 0 && e.sum.Dropped[DroppedNoTokenIDs] > 0 {
		return e.sum, e.noTokenIDsError()
	}
	if err := e.sink.close(); err != nil {
		return e.sum, fmt.Errorf("write: %w", err)
	}
	advise(&e.sum, e.opts)
	return e.sum, nil
}

func (e *Writer) noTokenIDsError() error {
	if m := e.opts.Manifest; m != nil && m.ReturnTokenIDs {
		return errors.New("no answer has token ids although the run asked for them (--return-token-ids): its backend did not return them (vLLM returns them from 0.10.2 on); regenerate on such a backend, or export another format")
	}
	return errors.New("no answer has token ids, which format speculators is made of: produce the run with --return-token-ids (or export another format)")
}

// Export writes every line of src to w as opts say and returns the
// summary. Failed units are read only for FormatOpenAIBatch.
func Write(ctx context.Context, src Source, w io.Writer, opts Options) (Summary, error) {
	e, err := NewWriter(w, opts)
	if err != nil {
		return Summary{}, err
	}
	return e.run(ctx, src)
}

func (e *Writer) run(ctx context.Context, src Source) (Summary, error) {
	if err := src.Completions(ctx, e.Completion); err != nil {
		return e.sum, err
	}
	if e.opts.Format == FormatOpenAIBatch {
		if err := src.Failed(ctx, e.Failed); err != nil {
			return e.sum, err
		}
	}
	return e.Close()
}

package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// Names of a run's output files in <data-dir>/<run>/.
const (
	CompletionsFile = "completions.jsonl"
	FailedFile      = "failed.jsonl"
	// EventsFile holds one schema.Throughput per line.
	EventsFile = "events.jsonl"
	// ManifestFile is a copy of the run's schema.Manifest, written by the
	// aggregator when it starts, so that the files describe their run
	// without NATS (aerie report reads it). It holds no secret: the
	// manifest has none.
	ManifestFile = "manifest.json"
)

// CompletionLine is one line of completions.jsonl: a complete training
// example with what produced it, one per unit (prompt id and sample). The
// id comes first so that a person (or `head`) sees it at once. The
// aggregator writes it and `aerie export` reads it, so both share this
// one definition of the file's shape.
type CompletionLine struct {
	ID string `json:"id"`
	// Sample is always written, 0 included: the id and the sample name
	// the line together, and a reader grouping the samples of a prompt
	// (or an aggregator reopening the file) then never has to know that a
	// missing sample means the first.
	Sample int `json:"sample"`
	// Messages are the conversation as sent for the last turn; with
	// --turns all its earlier assistant turns are the model's own, each
	// with its reasoning, finish reason, usage and token ids.
	Messages     []schema.Message `json:"messages"`
	Reasoning    string           `json:"reasoning"`
	Content      string           `json:"content"`
	FinishReason string           `json:"finish_reason"`
	Truncated    bool             `json:"truncated,omitempty"`
	// Turns is how many assistant turns were generated: 1 with --turns
	// last.
	Turns int `json:"turns"`
	// TurnsPlanned is set when a kept truncated turn ended the
	// conversation before its last turn: how many it had.
	TurnsPlanned int `json:"turns_planned,omitempty"`
	// Usage is summed over the turns generated.
	Usage schema.Usage `json:"usage"`
	// LengthHint is the tokens the input led to expect (its length_hint,
	// or its own answer's size), beside usage.completion_tokens; absent
	// when it had none.
	LengthHint int    `json:"length_hint,omitempty"`
	Model      string `json:"model"`
	// Params are the parameters the answer was generated with: the run's,
	// overridden by the prompt's own, for this sample.
	Params schema.Params `json:"params"`
	Worker string        `json:"worker"`
	// Hedged is set when the answer is a hedge's: a copy Worker sent at
	// the end of the run while a slower worker still generated the
	// original, and stored first.
	Hedged     bool      `json:"hedged,omitempty"`
	Attempts   int       `json:"attempts"`
	TTFTMillis int64     `json:"ttft_ms"`
	LatencyMs  int64     `json:"latency_ms"`
	FinishedAt time.Time `json:"finished_at"`
	// Simulated marks an answer of aerie's simulator: rehearsal data that
	// must not pass for a real model's.
	Simulated bool `json:"simulated,omitempty"`
	// PromptTokenIDs and TokenIDs are the last turn's token ids, when the
	// run asked for them (--return-token-ids); last, as they are long.
	PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int `json:"token_ids,omitempty"`
	// HiddenStates is a hidden-states sample's published file, and
	// InputIDs and LossMask the sample's: the output dataset's row.
	HiddenStates *schema.HiddenStatesFile `json:"hidden_states,omitempty"`
	InputIDs     []int64                  `json:"input_ids,omitempty"`
	LossMask     []int                    `json:"loss_mask,omitempty"`
}

// NewCompletionLine is the completions.jsonl line of a result. A result
// from before turns existed (Turns 0) had one turn, and says so.
func NewCompletionLine(r *schema.Result) CompletionLine {
	return CompletionLine{
		ID: r.ID, Sample: r.Sample, Messages: r.Messages, Reasoning: r.Reasoning, Content: r.Content,
		FinishReason: r.FinishReason, Truncated: r.Truncated, Turns: max(r.Turns, 1), TurnsPlanned: r.TurnsPlanned,
		Usage: schema.Usage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens},
		Model: r.Model, Params: r.Params, Worker: r.Worker, Attempts: r.Attempts,
		TTFTMillis: r.TTFTMillis, LatencyMs: r.LatencyMs, FinishedAt: r.FinishedAt,
		Simulated: r.Simulated, PromptTokenIDs: r.PromptTokenIDs, TokenIDs: r.TokenIDs,
		LengthHint: r.LengthHint, Hedged: r.Hedged,
		HiddenStates: r.HiddenStates, InputIDs: r.InputIDs, LossMask: r.LossMask,
	}
}

// Unit is the line's unit of work: its id and sample.
func (l *CompletionLine) Unit() schema.Unit { return schema.Unit{ID: l.ID, Sample: l.Sample} }

// IsTruncated reports whether the answer stopped at max_tokens: flagged
// truncated, or with finish_reason "length" (a line written by hand or
// by an older aerie may carry only the latter). Such an answer is not a
// clean training example.
func (l *CompletionLine) IsTruncated() bool {
	return l.Truncated || l.FinishReason == "length"
}

// FailedLine is one line of failed.jsonl, one per unit that failed for
// good.
type FailedLine struct {
	ID string `json:"id"`
	// Sample is always written, as in completions.jsonl.
	Sample int `json:"sample"`
	// Turn is, with --turns all, the turn that failed, from 1; the turns
	// before it are stored and a replay continues after them.
	Turn     int              `json:"turn,omitempty"`
	Messages []schema.Message `json:"messages"`
	Reason   string           `json:"reason"`
	Status   int              `json:"status,omitempty"`
	Error    string           `json:"error"`
	Body     string           `json:"body,omitempty"`
	Attempts int              `json:"attempts"`
	Worker   string           `json:"worker"`
	FailedAt time.Time        `json:"failed_at"`
	// Params are the prompt's own parameters (its input line's), when it
	// had any; a replay queues it with them.
	Params *schema.Params `json:"params,omitempty"`
	// InputIDs and LossMask are a hidden-states sample's: a replay queues
	// it with them, and the output dataset keeps its row.
	InputIDs []int64 `json:"input_ids,omitempty"`
	LossMask []int   `json:"loss_mask,omitempty"`
}

// NewFailedLine is the failed.jsonl line of a dead letter.
func NewFailedLine(d *schema.DeadLetter) FailedLine {
	return FailedLine{
		ID: d.ID, Sample: d.Sample, Turn: d.Turn, Messages: d.Messages, Reason: d.Reason, Status: d.Status,
		Error: d.Error, Body: d.Body, Attempts: d.Attempts, Worker: d.Worker, FailedAt: d.FailedAt,
		Params: d.Params, InputIDs: d.InputIDs, LossMask: d.LossMask,
	}
}

// Unit is the line's unit of work: its id and sample.
func (l *FailedLine) Unit() schema.Unit { return schema.Unit{ID: l.ID, Sample: l.Sample} }

// ReadCompletions calls fn with each line of a completions.jsonl read
// from r, in order, streaming (a file of any size needs one line in
// memory). name is the file's name for errors, which say "name:LINE".
// A last line without its newline that does not decode is the trace of a
// write cut short (an aggregator writing now, or one that crashed): it is
// left out, as the aggregator itself cuts it off. An error from fn stops
// the reading and is returned as it is.
func ReadCompletions(r io.Reader, name string, fn func(*CompletionLine) error) error {
	return ReadOutputLines(r, name, func(b []byte) error {
		var l CompletionLine
		if err := json.Unmarshal(b, &l); err != nil {
			return err
		}
		return CallerError{fn(&l)}
	})
}

// ReadFailed calls fn with each line of a failed.jsonl read from r, as
// ReadCompletions does.
func ReadFailed(r io.Reader, name string, fn func(*FailedLine) error) error {
	return ReadOutputLines(r, name, func(b []byte) error {
		var l FailedLine
		if err := json.Unmarshal(b, &l); err != nil {
			return err
		}
		return CallerError{fn(&l)}
	})
}

// CallerError carries an error of ReadOutputLines' caller through it
// untouched; a nil Err goes on to the next line.
type CallerError struct{ Err error }

func (e CallerError) Error() string { return e.Err.Error() }

// ReadOutputLines reads the non-blank lines of an output file named name
// from r, each checked to name its unit (LineUnit) before decode sees
// it. An error decode returns is the line's: a last line without its
// newline is taken as torn by a crash and left out, any other is
// reported with the file's name and the line's number; one wrapped in a
// CallerError is returned as it is.
func ReadOutputLines(r io.Reader, name string, decode func([]byte) error) error {
	lr := NewLineReader(r, MaxLineBytes)
	for {
		line, ended, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s after line %d: %w", name, lr.Line(), err)
		}
		if tooLong {
			if !ended {
				return nil // a torn last line
			}
			return fmt.Errorf("%s:%d: line longer than %d MiB: this is not an aerie output line; repair or remove it", name, lr.Line(), MaxLineBytes>>20)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		derr := func() error {
			if _, _, err := LineUnit(line); err != nil {
				return err
			}
			return decode(line)
		}()
		var fe CallerError
		switch {
		case errors.As(derr, &fe):
			if fe.Err != nil {
				return fe.Err
			}
		case derr != nil && !ended:
			return nil // a torn last line
		case derr != nil:
			return fmt.Errorf("%s:%d: not an aerie output line (%v): repair or remove that line", name, lr.Line(), derr)
		}
	}
}

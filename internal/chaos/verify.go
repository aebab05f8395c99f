package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// Outcome is what the output files hold, checked against the input.
type Outcome struct {
	// Prompts is the number of distinct ids in the input.
	Prompts int
	// Completed and Failed are the distinct ids in completions.jsonl and
	// failed.jsonl; Truncated counts completions cut at max_tokens.
	Completed, Failed, Truncated int
	// FailedByReason counts failed.jsonl's lines by their reason.
	FailedByReason map[string]int
	// Duplicates lists ids written more than once to the same file,
	// InBoth ids present in both files, Missing input ids in neither,
	// Unknown output ids that are not in the input.
	Duplicates, InBoth, Missing, Unknown []string
	// Unparseable lists, as "file:line: why", lines that are not a JSON
	// object with an id, including a last line without its newline.
	Unparseable []string
	// Unreplayable lists ids in failed.jsonl that have neither a dead
	// letter in AERIE_DEAD (from which `aerie replay` works) nor a
	// result; nil when not checked (see Report.State).
	Unreplayable []string
	// AnsweredNotWritten lists input ids whose answer is stored in
	// AERIE_RESULTS but that are not in completions.jsonl: an answer the
	// aggregator finished without writing. Nil when not checked.
	AnsweredNotWritten []string

	// With --turns all (Config.Turns above 1): Conversations is the
	// number of input conversations, TurnsPlanned the turns they have
	// (schema.TurnSlots of each, summed), TurnsWritten the turns of the
	// lines of completions.jsonl and TurnsBeforeFailure the turns stored
	// before the failed one of each line of failed.jsonl.
	Conversations, TurnsPlanned, TurnsWritten, TurnsBeforeFailure int
	// BadTurns lists, as "id: why", the lines whose turns are not the
	// conversation's: a completed line must have every turn (fewer only
	// when cut at max_tokens), the input's messages other than the
	// assistant's in order, and in place of each assistant message of the
	// input a generated answer, not the input's text, with its finish
	// reason and usage; a failed line must name a turn of the
	// conversation.
	BadTurns []string
	// LeftoverTurns lists, as "id: turns ...", completed conversations
	// whose stored turns AERIE_TURNS still holds at the end; nil when not
	// checked (see Report.TurnsStoreChecked). KeptTurns counts the failed
	// conversations that kept theirs, for a replay to continue after them.
	LeftoverTurns []string
	KeptTurns     int

	failedIDs []string        // every id of failed.jsonl, sorted
	completed map[string]bool // every id of completions.jsonl
}

// OK reports whether every input id is in exactly one file, once, and
// every failed one can be replayed.
func (o *Outcome) OK() bool {
	return len(o.Duplicates)+len(o.InBoth)+len(o.Missing)+len(o.Unknown)+len(o.Unparseable)+len(o.Unreplayable)+len(o.AnsweredNotWritten)+
		len(o.BadTurns)+len(o.LeftoverTurns) == 0
}

// inputPrompt is one prompt of the input as produce queues it.
type inputPrompt struct {
	ID string
	// Messages end with a user message. With --turns all, each assistant
	// message is the placeholder of a turn to generate; its Content is
	// the input's text, which the generated answer replaces.
	Messages []schema.Message
}

// readInput reads a prompts file the way produce does, with --turns all
// if turnsAll.
func readInput(path string, turnsAll bool) ([]inputPrompt, error) {
	opts := dataset.ParseOptions{Turns: schema.TurnsLast}
	if turnsAll {
		opts.Turns = schema.TurnsAll
	}
	rd, err := dataset.Open(path, opts)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	// The texts of the input's assistant turns, which --turns all does
	// not keep, from the same records read as --turns last.
	texts, err := dataset.Open(path, dataset.ParseOptions{Turns: schema.TurnsLast})
	if err != nil {
		return nil, err
	}
	defer texts.Close()
	var input []inputPrompt
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return input, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		last, err := texts.Next()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if rec.Err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, rec.N, rec.Err)
		}
		if last.Err != nil || len(last.Line.Messages) != len(rec.Line.Messages) {
			return nil, fmt.Errorf("%s:%d: the %s reads as %d messages with --turns %s and %d without: %v",
				path, rec.N, rd.Unit(), len(rec.Line.Messages), opts.Turns, len(last.Line.Messages), last.Err)
		}
		input = append(input, inputPrompt{ID: rec.Line.ID, Messages: last.Line.Messages})
	}
}

// inputIDs returns the ids of input, in order.
func inputIDs(input []inputPrompt) []string {
	out := make([]string, len(input))
	for i, p := range input {
		out[i] = p.ID
	}
	return out
}

// outputLine is what the check reads of a line of either file.
type outputLine struct {
	ID           *string `json:"id"`
	Sample       int     `json:"sample"`
	FinishReason string  `json:"finish_reason"`
	Truncated    bool    `json:"truncated"`
	Reason       string  `json:"reason"`

	// With --turns all.
	Messages     []outputMessage `json:"messages"`
	Turns        int             `json:"turns"`
	TurnsPlanned int             `json:"turns_planned"`
	Usage        *schema.Usage   `json:"usage"`
	// Turn is the turn a failed line failed at, from 1.
	Turn int `json:"turn"`
}

// outputMessage is a message of an output line.
type outputMessage struct {
	Role         string        `json:"role"`
	Content      string        `json:"content"`
	FinishReason string        `json:"finish_reason"`
	Usage        *schema.Usage `json:"usage"`
}

// readOutput returns every line of an output file, with the problems of
// those that are not output lines. A missing file has no lines.
func readOutput(path string) (lines []outputLine, bad []string, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for n := 1; ; n++ {
		b, err := r.ReadBytes('\n')
		if err == io.EOF {
			if len(b) > 0 {
				bad = append(bad, fmt.Sprintf("%s:%d: last line has no newline (torn write): %.80q", path, n, b))
			}
			return lines, bad, nil
		}
		if err != nil {
			return nil, nil, err
		}
		var l outputLine
		if jerr := json.Unmarshal(b, &l); jerr != nil {
			bad = append(bad, fmt.Sprintf("%s:%d: not JSON: %v: %.80q", path, n, jerr, b))
			continue
		}
		if l.ID == nil || *l.ID == "" {
			bad = append(bad, fmt.Sprintf("%s:%d: no id: %.80q", path, n, b))
			continue
		}
		lines = append(lines, l)
	}
}

// verify checks the two output files against the input; with turnsAll,
// each line's turns too (see Outcome.BadTurns).
func verify(input []inputPrompt, turnsAll bool, completionsPath, failedPath string) (*Outcome, error) {
	o := &Outcome{FailedByReason: map[string]int{}}
	want := make(map[string]bool, len(input))
	msgs := make(map[string][]schema.Message, len(input))
	for _, p := range input {
		want[p.ID] = true
		msgs[p.ID] = p.Messages
	}
	o.Prompts = len(want)
	if turnsAll {
		o.Conversations = len(msgs)
		for _, m := range msgs {
			o.TurnsPlanned += schema.TurnSlots(m)
		}
	}

	completions, bad, err := readOutput(completionsPath)
	if err != nil {
		return nil, err
	}
	o.Unparseable = append(o.Unparseable, bad...)
	failed, bad, err := readOutput(failedPath)
	if err != nil {
		return nil, err
	}
	o.Unparseable = append(o.Unparseable, bad...)

	done := map[string]int{}
	for _, l := range completions {
		key := unitKey(*l.ID, l.Sample)
		done[key]++
		if done[key] > 1 {
			continue
		}
		if l.Truncated || l.FinishReason == "length" {
			o.Truncated++
		}
		if in, ok := msgs[key]; ok && turnsAll {
			o.TurnsWritten += l.Turns
			if why := completedTurns(l, in); why != "" {
				o.BadTurns = append(o.BadTurns, key+": "+why)
			}
		}
	}
	dead := map[string]int{}
	for _, l := range failed {
		key := unitKey(*l.ID, l.Sample)
		dead[key]++
		if dead[key] > 1 {
			continue
		}
		o.FailedByReason[l.Reason]++
		if in, ok := msgs[key]; ok && turnsAll {
			slots := schema.TurnSlots(in)
			if l.Turn < 1 || l.Turn > slots {
				o.BadTurns = append(o.BadTurns, fmt.Sprintf("%s: failed at turn %d of a conversation of %d turns", key, l.Turn, slots))
			} else {
				o.TurnsBeforeFailure += l.Turn - 1
			}
		}
	}
	o.Completed, o.Failed = len(done), len(dead)
	o.completed = make(map[string]bool, len(done))
	for id := range done {
		o.completed[id] = true
	}
	for id, n := range done {
		if n > 1 {
			o.Duplicates = append(o.Duplicates, fmt.Sprintf("%s (%d times in completions.jsonl)", id, n))
		}
		if dead[id] > 0 {
			o.InBoth = append(o.InBoth, id)
		}
		if !want[id] {
			o.Unknown = append(o.Unknown, id)
		}
	}
	for id, n := range dead {
		o.failedIDs = append(o.failedIDs, id)
		if n > 1 {
			o.Duplicates = append(o.Duplicates, fmt.Sprintf("%s (%d times in failed.jsonl)", id, n))
		}
		if !want[id] {
			o.Unknown = append(o.Unknown, id)
		}
	}
	for id := range want {
		if done[id] == 0 && dead[id] == 0 {
			o.Missing = append(o.Missing, id)
		}
	}
	for _, s := range [][]string{o.Duplicates, o.InBoth, o.Missing, o.Unknown, o.failedIDs, o.BadTurns} {
		sort.Strings(s)
	}
	return o, nil
}

// completedTurns checks a line of completions.jsonl of a --turns all
// run against the input conversation in (as queued, the input's
// assistant texts in place of the placeholders) and says what is wrong
// with it; "" when nothing is. The line holds the messages of its last
// turn: the input's up to that turn's placeholder, each earlier
// placeholder replaced by the answer generated for it; the last answer
// is the line's own content, finish reason and usage.
func completedTurns(l outputLine, in []schema.Message) string {
	slots := schema.TurnSlots(in)
	truncated := l.Truncated || l.FinishReason == "length"
	switch {
	case l.Turns < 1 || l.Turns > slots:
		return fmt.Sprintf("turns %d, but the conversation has %d", l.Turns, slots)
	case l.Turns < slots && !truncated:
		return fmt.Sprintf("turns %d of %d, and the last one was not cut at max_tokens", l.Turns, slots)
	case l.Turns < slots && l.TurnsPlanned != slots:
		return fmt.Sprintf("cut at max_tokens at turn %d of %d, but turns_planned is %d", l.Turns, slots, l.TurnsPlanned)
	case l.FinishReason == "":
		return "the last turn has no finish_reason"
	case l.Usage == nil || l.Usage.CompletionTokens < 1:
		return "the last turn has no usage"
	}
	// The messages of the last turn: the input's up to its placeholder.
	var want []schema.Message
	seen := 0
	for _, m := range in {
		if m.Role == "assistant" {
			if seen == l.Turns-1 {
				break
			}
			seen++
		}
		want = append(want, m)
	}
	if len(l.Messages) != len(want) {
		return fmt.Sprintf("%d messages for turn %d, want %d", len(l.Messages), l.Turns, len(want))
	}
	turn := 0
	for i, m := range l.Messages {
		w := want[i]
		if m.Role != w.Role {
			return fmt.Sprintf("message %d is %s, the input's is %s", i+1, m.Role, w.Role)
		}
		if w.Role != "assistant" {
			if m.Content != w.Content {
				return fmt.Sprintf("message %d (%s) is not the input's: %.60q", i+1, w.Role, m.Content)
			}
			continue
		}
		turn++
		switch {
		case m.Content == w.Content:
			return fmt.Sprintf("turn %d (message %d) is the input's assistant text, not a generated answer: %.60q", turn, i+1, m.Content)
		case m.FinishReason == "":
			return fmt.Sprintf("turn %d (message %d) has no finish_reason", turn, i+1)
		case m.FinishReason == "length":
			return fmt.Sprintf("turn %d (message %d) was cut at max_tokens, yet the conversation went on", turn, i+1)
		case m.Usage == nil || m.Usage.CompletionTokens < 1:
			return fmt.Sprintf("turn %d (message %d) has no usage", turn, i+1)
		}
	}
	return ""
}

// readSamples reads a hidden-states run's samples file the way produce
// does: each sample's id is its idx.
func readSamples(path string) ([]inputPrompt, error) {
	rd, err := dataset.Open(path, dataset.ParseOptions{Task: schema.TaskHiddenStates})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var input []inputPrompt
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return input, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if rec.Err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, rec.N, rec.Err)
		}
		input = append(input, inputPrompt{ID: rec.Line.ID})
	}
}

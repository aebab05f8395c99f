package lineindex

import (
	"encoding/json"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// Summary is what the index keeps of one completions.jsonl line: where it
// is and a checksum of its bytes, its unit, and the few numbers that a
// restarted aggregator's estimate and the end-of-run report read of it.
// Content, reasoning and token ids are not in it: they are the bulk of a
// line, and nothing that reads the index needs them.
type Summary struct {
	ID     string
	Sample int
	// Offset is where the line starts in the file, and Length its bytes
	// up to and including its newline; CRC is the CRC-32C (Castagnoli) of
	// those bytes. They are zero in a summary not yet placed (Place).
	Offset int64
	Length int
	CRC    uint32

	FinishReason     string
	Truncated        bool
	Turns            int
	TurnsPlanned     int
	PromptTokens     int
	CompletionTokens int
	LengthHint       int
	// Assistants are the line's assistant messages, in order: with
	// --turns all the turns generated before the last, each with its own
	// usage and finish reason.
	Assistants []Turn
	Worker     string
	TTFTMillis int64
	LatencyMs  int64
	FinishedAt time.Time
	Simulated  bool
}

// Turn is what a summary keeps of an assistant message.
type Turn struct {
	// CompletionTokens is the message's usage.completion_tokens; 0 when
	// it has no usage.
	CompletionTokens int
	// Cut is set when its finish reason is "length".
	Cut bool
}

// Unit is the line's unit.
func (s *Summary) Unit() schema.Unit { return schema.Unit{ID: s.ID, Sample: s.Sample} }

// IsTruncated reports whether the line's answer was cut at max_tokens, as
// dataset.CompletionLine.IsTruncated does.
func (s *Summary) IsTruncated() bool { return s.Truncated || s.FinishReason == "length" }

// Summarize is the summary of a line about to be written, not yet placed.
func Summarize(l *dataset.CompletionLine) Summary {
	s := Summary{
		ID: l.ID, Sample: l.Sample,
		FinishReason: l.FinishReason, Truncated: l.Truncated, Turns: l.Turns, TurnsPlanned: l.TurnsPlanned,
		PromptTokens: l.Usage.PromptTokens, CompletionTokens: l.Usage.CompletionTokens, LengthHint: l.LengthHint,
		Worker: l.Worker, TTFTMillis: l.TTFTMillis, LatencyMs: l.LatencyMs, FinishedAt: l.FinishedAt, Simulated: l.Simulated,
	}
	for i := range l.Messages {
		m := &l.Messages[i]
		s.addMessage(m.Role, m.FinishReason, m.Usage)
	}
	return s
}

// addMessage adds a message of the line's to Assistants if it is one.
func (s *Summary) addMessage(role, finishReason string, usage *schema.Usage) {
	if role != "assistant" {
		return
	}
	t := Turn{Cut: finishReason == "length"}
	if usage != nil {
		t.CompletionTokens = usage.CompletionTokens
	}
	s.Assistants = append(s.Assistants, t)
}

// head is what SummarizeJSON decodes of a line: the fields of a Summary,
// and none of the long ones.
type head struct {
	ID           json.RawMessage `json:"id"`
	Sample       int             `json:"sample"`
	Messages     []turn          `json:"messages"`
	FinishReason string          `json:"finish_reason"`
	Truncated    bool            `json:"truncated"`
	Turns        int             `json:"turns"`
	TurnsPlanned int             `json:"turns_planned"`
	Usage        struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	LengthHint int       `json:"length_hint"`
	Worker     string    `json:"worker"`
	TTFTMillis int64     `json:"ttft_ms"`
	LatencyMs  int64     `json:"latency_ms"`
	FinishedAt time.Time `json:"finished_at"`
	Simulated  bool      `json:"simulated"`
}

type turn struct {
	Role         string        `json:"role"`
	FinishReason string        `json:"finish_reason"`
	Usage        *schema.Usage `json:"usage"`
}

// SummarizeJSON is the summary of a completions.jsonl line read back, not
// placed. The whole line must be JSON and its fields of the types aerie
// writes; its id is read as dataset.LineUnit reads it.
func SummarizeJSON(line []byte) (Summary, error) {
	var h head
	if err := json.Unmarshal(line, &h); err != nil {
		return Summary{}, err
	}
	id, err := dataset.ParseID(h.ID)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{
		ID: id, Sample: h.Sample,
		FinishReason: h.FinishReason, Truncated: h.Truncated, Turns: h.Turns, TurnsPlanned: h.TurnsPlanned,
		PromptTokens: h.Usage.PromptTokens, CompletionTokens: h.Usage.CompletionTokens, LengthHint: h.LengthHint,
		Worker: h.Worker, TTFTMillis: h.TTFTMillis, LatencyMs: h.LatencyMs, FinishedAt: h.FinishedAt, Simulated: h.Simulated,
	}
	for _, m := range h.Messages {
		s.addMessage(m.Role, m.FinishReason, m.Usage)
	}
	return s, nil
}

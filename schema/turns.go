package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Which assistant turns of a conversation a run generates.
const (
	// TurnsLast generates the answer to the conversation as given: earlier
	// assistant turns of the input are sent as they are.
	TurnsLast = "last"
	// TurnsAll regenerates every assistant turn in order: turn 1 from the
	// context up to the first user message, then turn 2 with the model's
	// own first answer in its context, and so on. The input's assistant
	// turns are never sent.
	TurnsAll = "all"
)

// What an earlier generated answer carries back into the context of a
// later turn with TurnsAll.
const (
	// ContextReasoningDrop sends the answer's content only, as reasoning
	// models' chat templates drop the reasoning of earlier turns anyway.
	ContextReasoningDrop = "drop"
	// ContextReasoningKeep also sends its reasoning, as reasoning_content,
	// for templates that render it.
	ContextReasoningKeep = "keep"
)

// Unit is one unit of work of a run: a prompt id and a sample (0 to
// Manifest.Samples-1). Each unit is queued once, answered once and
// written as one output line; the zero sample is the only one of a run
// without --samples.
type Unit struct {
	ID     string
	Sample int
}

// Token is the unit's subject token: SubjectToken(ID) for sample 0, so
// that runs without samples keep their subjects, and for sample k the
// first 16 bytes of a SHA-256 over a domain, k and the id.
func (u Unit) Token() string {
	if u.Sample == 0 {
		return SubjectToken(u.ID)
	}
	h := sha256.New()
	h.Write([]byte("aerie/sample\x00"))
	h.Write([]byte(strconv.Itoa(u.Sample)))
	h.Write([]byte{0})
	h.Write([]byte(u.ID))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Key is the unit as one string, for maps of units: the id for sample 0
// and "<id>\x00<sample>" otherwise. Ids may not contain a NUL byte (the
// producer refuses them), so no two units share a key.
func (u Unit) Key() string {
	if u.Sample == 0 {
		return u.ID
	}
	return u.ID + "\x00" + strconv.Itoa(u.Sample)
}

// TurnSlots is the number of assistant turns a conversation has with
// TurnsAll: one for every assistant message (a placeholder whose content
// is never sent) and one for the answer to the final user message.
func TurnSlots(msgs []Message) int {
	n := 1
	for _, m := range msgs {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// Turn is one finished assistant turn of a conversation generated with
// TurnsAll, stored (TurnsStream) before the next turn starts, so that a
// worker that dies during a later turn costs only that turn: whoever
// gets the conversation next continues after the last stored turn.
type Turn struct {
	V      int    `msgpack:"v"`
	Run    string `msgpack:"run"`
	ID     string `msgpack:"id"`
	Sample int    `msgpack:"sample,omitempty"`
	// Index is the turn's position in the conversation, from 0.
	Index int `msgpack:"index"`
	// Answer is the model's answer: role assistant, with its reasoning,
	// finish reason, usage and token ids.
	Answer Message `msgpack:"answer"`
	// MaxTokens is the max_tokens it was generated with (0: unset).
	MaxTokens  int       `msgpack:"max_tokens,omitempty"`
	Worker     string    `msgpack:"worker"`
	TTFTMillis int64     `msgpack:"ttft_ms"`
	LatencyMs  int64     `msgpack:"latency_ms"`
	FinishedAt time.Time `msgpack:"finished_at"`
	Simulated  bool      `msgpack:"simulated,omitempty"`
}

func (t *Turn) version() int { return t.V }

// KindTurn is the schema kind of a stored turn.
const KindTurn = "turn"

// EncodeTurn encodes a stored turn.
func EncodeTurn(t *Turn) ([]byte, error) {
	t.V = Version
	return encode(KindTurn, t)
}

// DecodeTurn decodes a stored turn.
func DecodeTurn(b []byte) (*Turn, error) {
	t := new(Turn)
	return t, decode(KindTurn, b, t)
}

package producer

import (
	"crypto/sha256"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// expectHeaderSize is the size of the header that
// WithExpectLastSequencePerSubject(0) adds at publish time, counted when a
// message is compared with the server's max_payload.
var expectHeaderSize = len(jetstream.ExpectedLastSubjSeqHeader) + len(": 0\r\n")

// linePrompt is the prompt a parsed line queues, for sample 0.
func linePrompt(run, source string, l dataset.Line) *schema.Prompt {
	return &schema.Prompt{Run: run, ID: l.ID, Messages: l.Messages, Source: source, Params: l.Params, LengthHint: l.LengthHint,
		InputIDs: l.InputIDs, LossMask: l.LossMask}
}

// promptMessage builds the message that queues one unit of a prompt (its
// Sample), for a run that needs the features needs. Its subject and
// Nats-Msg-Id depend only on the run and the unit, so publishing it
// again, from this produce or any later one, is recognised as a repeat.
func promptMessage(p *schema.Prompt, needs []string) (*nats.Msg, error) {
	data, err := schema.EncodePrompt(p)
	if err != nil {
		return nil, err
	}
	u := p.Unit()
	m := nats.NewMsg(schema.PromptSubject(p.Run, u))
	m.Data = data
	m.Header.Set(schema.HeaderMsgID, schema.MsgID(p.Run, u))
	m.Header.Set(schema.HeaderPromptID, p.ID)
	m.Header.Set(schema.HeaderRun, p.Run)
	if u.Sample > 0 {
		m.Header.Set(schema.HeaderSample, strconv.Itoa(u.Sample))
	}
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindPrompt))
	m.Header.Set(schema.HeaderContentType, schema.ContentTypeMsgpack)
	schema.SetNeeds(m.Header, schema.MessageNeeds(needs, p.Uses()))
	return m, nil
}

// payloadSize is what the server compares with its max_payload: the data
// and the headers, including the one added when the message is published.
func payloadSize(m *nats.Msg) int64 {
	return int64(m.Size()-len(m.Subject)-len(m.Reply)) + int64(expectHeaderSize)
}

// tokenOf is the digest behind schema.SubjectToken, as an array: two ids
// with the same token would share a subject, so duplicates are detected by
// token.
func tokenOf(id string) [16]byte {
	sum := sha256.Sum256([]byte(id))
	return [16]byte(sum[:16])
}

// oversizeReason explains a prompt too large for the server.
func oversizeReason(id string, size, limit int64) string {
	return fmt.Sprintf("prompt %q is a %s message, over the server's max_payload of %s: raise max_payload in the nats-server configuration (aerie's embedded server allows %s), or shorten or remove this prompt",
		dataset.Truncate(id, 60), formatBytes(size), formatBytes(limit), formatBytes(broker.DefaultMaxPayload))
}

// formatBytes writes a size in bytes, KiB or MiB with one decimal.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	default:
		return strconv.Itoa(int(n)) + " bytes"
	}
}

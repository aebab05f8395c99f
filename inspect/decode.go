package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/aerie-dev/aerie/schema"
)

// Decoded is one message as JSON.
type Decoded struct {
	// Kind is schema.KindPrompt, KindResult, KindDeadLetter, KindTurn or
	// KindEvent.
	Kind string
	// JSON is the message, compact: for a wire type an object with its
	// msgpack field names in wire order, for an event the event itself.
	JSON json.RawMessage
}

// Decode reads one message (see parseInput for the forms it takes) and
// returns it as JSON. kind, when not empty, says what the message is;
// otherwise the Aerie-Schema header tells, then the subject, then the
// payload's fields. Every failure is an error saying what was wrong.
func Decode(in []byte, kind string) (*Decoded, error) {
	if kind != "" && !slices.Contains(Kinds, kind) {
		return nil, fmt.Errorf("kind %q is not one of %s", kind, strings.Join(Kinds, ", "))
	}
	m := parseInput(in)
	header := m.header.Get(schema.HeaderSchema)
	if kind == "" && header != "" {
		var err error
		if kind, err = kindOfHeader(header); err != nil {
			return nil, err
		}
	}
	if kind == "" {
		kind = kindOfSubject(m.subject)
	}
	if kind == KindEvent || kind == "" && looksLikeJSON(m.data) {
		return decodeJSON(m.data)
	}
	body, keys, err := msgpackBody(m.data)
	if err != nil {
		if kind != "" {
			return nil, fmt.Errorf("%s message: %w", kind, err)
		}
		return nil, fmt.Errorf("%w (expected a prompt, result, dead letter or turn, which are msgpack, or a JSON event)", err)
	}
	if kind == "" {
		if kind, err = kindOfPayload(keys); err != nil {
			return nil, err
		}
	}
	if header != "" {
		if err := schema.CheckSchemaHeader(kind, header); err != nil {
			return nil, err
		}
	}
	if err := checkPayload(kind, keys); err != nil {
		return nil, err
	}
	v, err := decodeWire(kind, body)
	if err != nil {
		return nil, err
	}
	out, err := wireJSON(v)
	if err != nil {
		return nil, fmt.Errorf("%s message: %w", kind, err)
	}
	return &Decoded{Kind: kind, JSON: out}, nil
}

func decodeWire(kind string, b []byte) (any, error) {
	switch kind {
	case schema.KindPrompt:
		return schema.DecodePrompt(b)
	case schema.KindResult:
		return schema.DecodeResult(b)
	case schema.KindDeadLetter:
		return schema.DecodeDeadLetter(b)
	case schema.KindTurn:
		return schema.DecodeTurn(b)
	}
	return nil, fmt.Errorf("kind %q is not a msgpack kind", kind)
}

// msgpackBody finds the msgpack map in data. The nats CLI ends what it
// prints with up to three newlines of its own; a msgpack value has a
// definite end, so at most one of the candidates is exactly one map.
func msgpackBody(data []byte) (body []byte, keys []string, err error) {
	var firstErr error
	for k := 0; k <= 3; k++ {
		keys, err := wireKeys(data)
		if err == nil {
			return data, keys, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if !bytes.HasSuffix(data, []byte("\n")) {
			break
		}
		data = data[:len(data)-1]
	}
	return nil, nil, firstErr
}

func looksLikeJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

func decodeJSON(b []byte) (*Decoded, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, bytes.TrimSpace(b)); err != nil {
		return nil, fmt.Errorf("event is not valid JSON: %w", err)
	}
	return &Decoded{Kind: KindEvent, JSON: buf.Bytes()}, nil
}

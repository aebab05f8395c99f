package export

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// span is a value of a line as it stands in the line, [start, end) of
// the row's arena: a JSON string keeps its quotes and escapes, an array
// its brackets. The exports copy most values through without decoding
// them, which is what makes them fast: an answer of a megabyte is
// scanned once and copied, never unescaped and escaped again.
type span struct{ start, end int }

func (s span) empty() bool { return s.end <= s.start }

// exportTurn is one message of an exported conversation: an input
// message, or an assistant turn the target generated.
type exportTurn struct {
	role string
	// content and reasoning are raw JSON strings; reasoning is empty
	// (no span) when the turn has none.
	content, reasoning span
	// generated is set on the assistant turns the target wrote: the
	// line's answer, and with --turns all the earlier answers, which
	// carry their finish reason and usage. An assistant turn without
	// them came from the prompts file.
	generated bool
	finish    string
	usage     schema.Usage
	// promptIDs and tokenIDs are raw arrays of token ids; counted in
	// nPrompt and nTokens.
	promptIDs, tokenIDs span
	nPrompt, nTokens    int
	// contentEmpty and reasoningEmpty say the text is empty or white
	// space only.
	contentEmpty, reasoningEmpty bool
}

// exportRow is what the exports need of one completions.jsonl line,
// decoded field by field and the rest skipped. Its spans point into
// arena, which the next line reuses.
type exportRow struct {
	unit schema.Unit
	// turns are the conversation as trained: every message as sent for
	// the last turn, then the last answer.
	turns      []exportTurn
	truncated  bool
	model      string
	simulated  bool
	finishedAt string
	// usage is the line's usage, summed over its generated turns.
	usage schema.Usage
	arena []byte
}

// raw is the bytes of a span.
func (r *exportRow) raw(s span) []byte { return r.arena[s.start:s.end] }

// text is a raw JSON string span unquoted.
func (r *exportRow) text(s span) string {
	if s.empty() {
		return ""
	}
	b, err := jsontext.AppendUnquote(nil, r.raw(s))
	if err != nil {
		return ""
	}
	return string(b)
}

// last is the line's own answer: the last turn.
func (r *exportRow) last() *exportTurn { return &r.turns[len(r.turns)-1] }

// isTruncated is CompletionLine.IsTruncated of the row.
func (r *exportRow) isTruncated() bool { return r.truncated || r.last().finish == "length" }

// rowDecoder decodes completions.jsonl lines into exportRows, reusing
// its decoder and buffers from one line to the next. wantIDs keeps the
// token ids (format speculators); other formats skip them unread.
type rowDecoder struct {
	dec     *jsontext.Decoder
	rd      bytes.Reader
	wantIDs bool
}

func newRowDecoder(wantIDs bool) *rowDecoder {
	d := &rowDecoder{wantIDs: wantIDs}
	d.dec = jsontext.NewDecoder(&d.rd)
	return d
}

var errNotObject = errors.New("not a JSON object")

// decode reads line into r. An error says what about the line is wrong.
func (d *rowDecoder) decode(line []byte, r *exportRow) error {
	d.rd.Reset(line)
	d.dec.Reset(&d.rd)
	*r = exportRow{turns: r.turns[:0], arena: r.arena[:0]}
	if d.dec.PeekKind() != '{' {
		return errNotObject
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return err
	}
	var answer exportTurn
	answer.role, answer.generated = "assistant", true
	hasID := false
	for d.dec.PeekKind() != '}' {
		name, err := d.dec.ReadToken()
		if err != nil {
			return err
		}
		switch name.String() {
		case "id":
			v, err := d.dec.ReadValue()
			if err != nil {
				return err
			}
			if r.unit.ID, err = dataset.ParseID(json.RawMessage(v)); err != nil {
				return err
			}
			hasID = true
		case "sample":
			v, err := d.dec.ReadValue()
			if err != nil {
				return err
			}
			if r.unit.Sample, err = dataset.ParseSample(json.RawMessage(v)); err != nil {
				return err
			}
		case "messages":
			if err := d.messages(r); err != nil {
				return fmt.Errorf("messages: %w", err)
			}
		case "reasoning":
			if answer.reasoning, err = d.str(r); err != nil {
				return fmt.Errorf("reasoning: %w", err)
			}
		case "content":
			if answer.content, err = d.str(r); err != nil {
				return fmt.Errorf("content: %w", err)
			}
		case "finish_reason":
			if answer.finish, err = d.plainString(); err != nil {
				return fmt.Errorf("finish_reason: %w", err)
			}
		case "truncated":
			if r.truncated, err = d.boolean(); err != nil {
				return fmt.Errorf("truncated: %w", err)
			}
		case "usage":
			if r.usage, err = d.usage(); err != nil {
				return fmt.Errorf("usage: %w", err)
			}
		case "model":
			if r.model, err = d.plainString(); err != nil {
				return fmt.Errorf("model: %w", err)
			}
		case "simulated":
			if r.simulated, err = d.boolean(); err != nil {
				return fmt.Errorf("simulated: %w", err)
			}
		case "finished_at":
			if r.finishedAt, err = d.plainString(); err != nil {
				return fmt.Errorf("finished_at: %w", err)
			}
		case "prompt_token_ids":
			if answer.promptIDs, answer.nPrompt, err = d.ids(r); err != nil {
				return fmt.Errorf("prompt_token_ids: %w", err)
			}
		case "token_ids":
			if answer.tokenIDs, answer.nTokens, err = d.ids(r); err != nil {
				return fmt.Errorf("token_ids: %w", err)
			}
		default:
			if err := d.dec.SkipValue(); err != nil {
				return err
			}
		}
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return err
	}
	if !hasID {
		return dataset.ErrNoID
	}
	// The answer's own usage is the line's less its earlier turns'.
	answer.finish = nonEmpty(answer.finish, "stop")
	answer.usage = r.usage
	for _, t := range r.turns {
		if t.generated {
			answer.usage.PromptTokens -= t.usage.PromptTokens
			answer.usage.CompletionTokens -= t.usage.CompletionTokens
		}
	}
	answer.usage.PromptTokens = max(answer.usage.PromptTokens, 0)
	answer.usage.CompletionTokens = max(answer.usage.CompletionTokens, 0)
	if answer.content.empty() {
		answer.content = r.put([]byte(`""`))
	}
	answer.contentEmpty = blankJSONString(r.raw(answer.content))
	answer.reasoningEmpty = answer.reasoning.empty() || blankJSONString(r.raw(answer.reasoning))
	r.turns = append(r.turns, answer)
	return nil
}

func nonEmpty(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// messages reads the line's messages array.
func (d *rowDecoder) messages(r *exportRow) error {
	if d.dec.PeekKind() == 'n' {
		_, err := d.dec.ReadToken()
		return err
	}
	if tok, err := d.dec.ReadToken(); err != nil || tok.Kind() != '[' {
		return errors.New("not an array")
	}
	for d.dec.PeekKind() != ']' {
		if tok, err := d.dec.ReadToken(); err != nil || tok.Kind() != '{' {
			return errors.New("a message is not an object")
		}
		var t exportTurn
		for d.dec.PeekKind() != '}' {
			name, err := d.dec.ReadToken()
			if err != nil {
				return err
			}
			switch name.String() {
			case "role":
				t.role, err = d.plainString()
			case "content":
				t.content, err = d.str(r)
			case "reasoning":
				t.reasoning, err = d.str(r)
			case "finish_reason":
				t.finish, err = d.plainString()
				t.generated = true
			case "usage":
				t.usage, err = d.usage()
				t.generated = true
			case "prompt_token_ids":
				t.promptIDs, t.nPrompt, err = d.ids(r)
			case "token_ids":
				t.tokenIDs, t.nTokens, err = d.ids(r)
			default:
				err = d.dec.SkipValue()
			}
			if err != nil {
				return err
			}
		}
		if _, err := d.dec.ReadToken(); err != nil {
			return err
		}
		if t.role != "assistant" {
			t.generated = false
		}
		if t.content.empty() {
			t.content = r.put([]byte(`""`))
		}
		t.contentEmpty = blankJSONString(r.raw(t.content))
		t.reasoningEmpty = t.reasoning.empty() || blankJSONString(r.raw(t.reasoning))
		r.turns = append(r.turns, t)
	}
	_, err := d.dec.ReadToken()
	return err
}

// put copies b into the row's arena.
func (r *exportRow) put(b []byte) span {
	s := span{start: len(r.arena)}
	r.arena = append(r.arena, b...)
	s.end = len(r.arena)
	return s
}

// str reads a string (or null, which is no span) into the arena.
func (d *rowDecoder) str(r *exportRow) (span, error) {
	switch d.dec.PeekKind() {
	case 'n':
		_, err := d.dec.ReadToken()
		return span{}, err
	case '"':
		v, err := d.dec.ReadValue()
		if err != nil {
			return span{}, err
		}
		return r.put(v), nil
	}
	return span{}, errors.New("not a string")
}

// plainString reads a short string (a role, a finish reason), or null.
func (d *rowDecoder) plainString() (string, error) {
	tok, err := d.dec.ReadToken()
	if err != nil {
		return "", err
	}
	switch tok.Kind() {
	case 'n':
		return "", nil
	case '"':
		return tok.String(), nil
	}
	return "", errors.New("not a string")
}

func (d *rowDecoder) boolean() (bool, error) {
	tok, err := d.dec.ReadToken()
	if err != nil {
		return false, err
	}
	switch tok.Kind() {
	case 't', 'f':
		return tok.Bool(), nil
	case 'n':
		return false, nil
	}
	return false, errors.New("not a boolean")
}

// usage reads {"prompt_tokens", "completion_tokens"}.
func (d *rowDecoder) usage() (schema.Usage, error) {
	var u schema.Usage
	if d.dec.PeekKind() == 'n' {
		_, err := d.dec.ReadToken()
		return u, err
	}
	if tok, err := d.dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return u, errors.New("not an object")
	}
	for d.dec.PeekKind() != '}' {
		name, err := d.dec.ReadToken()
		if err != nil {
			return u, err
		}
		var dst *int
		switch name.String() {
		case "prompt_tokens":
			dst = &u.PromptTokens
		case "completion_tokens":
			dst = &u.CompletionTokens
		default:
			if err := d.dec.SkipValue(); err != nil {
				return u, err
			}
			continue
		}
		tok, err := d.dec.ReadToken()
		if err != nil {
			return u, err
		}
		if tok.Kind() != '0' {
			return u, errors.New("a token count is not a number")
		}
		n, err := strconv.Atoi(tok.String())
		if err != nil || n < 0 {
			return u, fmt.Errorf("token count %s is not a count", tok.String())
		}
		*dst = n
	}
	_, err := d.dec.ReadToken()
	return u, err
}

// ids reads an array of token ids: kept raw (and checked to hold only
// non-negative integers) when the export needs them, counted either way.
func (d *rowDecoder) ids(r *exportRow) (span, int, error) {
	if d.dec.PeekKind() == 'n' {
		_, err := d.dec.ReadToken()
		return span{}, 0, err
	}
	v, err := d.dec.ReadValue()
	if err != nil {
		return span{}, 0, err
	}
	if v.Kind() != '[' {
		return span{}, 0, errors.New("not an array")
	}
	n := 0
	inNumber := false
	for _, c := range v[1 : len(v)-1] {
		switch {
		case c >= '0' && c <= '9':
			if !inNumber {
				n++
				inNumber = true
			}
		case c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r':
			inNumber = false
		default:
			return span{}, 0, errors.New("holds something other than non-negative integers")
		}
	}
	if !d.wantIDs {
		return span{}, n, nil
	}
	return r.put(v), n, nil
}

// blankJSONString reports whether a raw JSON string holds only white
// space: "", " ", "\n\n" and the like.
func blankJSONString(raw []byte) bool {
	if len(raw) < 2 {
		return true
	}
	inner := raw[1 : len(raw)-1]
	for i := 0; i < len(inner); i++ {
		switch inner[i] {
		case ' ':
		case '\\':
			if i+1 >= len(inner) {
				return false
			}
			switch inner[i+1] {
			case 'n', 't', 'r':
				i++
			default:
				return false
			}
		default:
			return false
		}
	}
	return true
}

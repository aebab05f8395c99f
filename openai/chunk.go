package openai

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// chunkDecoder decodes the chunks of a chat stream without reflection.
// It reads the fields aerie uses and skips the rest, checking as it goes
// that the chunk is valid JSON. Whatever it is not sure of (an escaped
// key, a key that differs from a known one only in case, a repeated key,
// a value of an unexpected type, an error object, anything invalid) it
// declines, and the caller decodes the chunk with encoding/json instead,
// so the result is always the one encoding/json gives. The zero value is
// ready to use; a decoder belongs to one stream.
type chunkDecoder struct {
	// choices is reused from chunk to chunk: the state keeps none of a
	// chunk's choices, only their token id slices, which are always new.
	choices []streamChoice
	// id, model and object are usually the same in every chunk of a
	// stream: the last ones are kept so that a repeat costs nothing.
	id, model, object string
}

// maxSkipDepth bounds the nesting of a skipped value. Deeper input is
// left to encoding/json, which has a limit of its own.
const maxSkipDepth = 200

// decode decodes the JSON object at the start of b (no leading space)
// into c, which must be zero, and returns the bytes it took. ok is false
// when the caller must use encoding/json for this chunk; c is then
// undefined.
func (d *chunkDecoder) decode(b []byte, c *streamChunk) (n int, ok bool) {
	p := parser{b: b}
	var seen uint16
	ok = p.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return p.once(&seen, 0) && p.cachedString(&c.ID, &d.id)
		case "model":
			return p.once(&seen, 1) && p.cachedString(&c.Model, &d.model)
		case "system_fingerprint":
			return p.once(&seen, 2) && p.stringInto(&c.SystemFingerprint)
		case "object":
			return p.once(&seen, 3) && p.cachedString(&c.Object, &d.object)
		case "choices":
			return p.once(&seen, 4) && d.choicesInto(&p, c)
		case "usage":
			return p.once(&seen, 5) && p.usageInto(&c.Usage)
		case "prompt_token_ids":
			return p.once(&seen, 6) && p.intsInto(&c.PromptTokenIDs)
		}
		// The error fields, and any key encoding/json would match to a
		// field without matching case, are left to encoding/json.
		return !foldsToAny(key, chunkKeys) && p.skip(0)
	})
	return p.i, ok
}

// chunkKeys are the JSON names of streamChunk's fields, with those of
// its embedded error envelope.
var chunkKeys = []string{"id", "model", "system_fingerprint", "object", "choices", "usage", "prompt_token_ids",
	"error", "message", "type", "param", "code"}

var (
	choiceKeys = []string{"index", "delta", "finish_reason", "token_ids"}
	deltaKeys  = []string{"content", "reasoning", "reasoning_content"}
	usageKeys  = []string{"prompt_tokens", "completion_tokens", "total_tokens"}
)

// foldsToAny reports whether key equals one of names under the Unicode
// case folding encoding/json matches field names with.
func foldsToAny(key []byte, names []string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

func (d *chunkDecoder) choicesInto(p *parser, c *streamChunk) bool {
	if p.null() {
		c.Choices = nil
		return true
	}
	if d.choices == nil {
		d.choices = make([]streamChoice, 0, 1) // [] is empty, not nil
	}
	d.choices = d.choices[:0]
	ok := p.array(func() bool {
		d.choices = append(d.choices, streamChoice{})
		return p.choice(&d.choices[len(d.choices)-1])
	})
	c.Choices = d.choices
	return ok
}

func (p *parser) choice(ch *streamChoice) bool {
	if p.peek() != '{' {
		return false // null or another type: left to encoding/json
	}
	var seen uint16
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			return p.once(&seen, 0) && p.intInto(&ch.Index)
		case "delta":
			return p.once(&seen, 1) && p.delta(&ch.Delta)
		case "finish_reason":
			if !p.once(&seen, 2) {
				return false
			}
			if p.null() {
				ch.FinishReason = nil
				return true
			}
			var s string
			if !p.stringInto(&s) {
				return false
			}
			ch.FinishReason = &s
			return true
		case "token_ids":
			return p.once(&seen, 3) && p.intsInto(&ch.TokenIDs)
		}
		return !foldsToAny(key, choiceKeys) && p.skip(0)
	})
}

func (p *parser) delta(t *textParts) bool {
	if p.null() {
		return true // null leaves a struct as it is
	}
	var seen uint16
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "content":
			return p.once(&seen, 0) && p.stringInto(&t.Content)
		case "reasoning":
			return p.once(&seen, 1) && p.stringInto(&t.Reasoning)
		case "reasoning_content":
			return p.once(&seen, 2) && p.stringInto(&t.ReasoningContent)
		}
		return !foldsToAny(key, deltaKeys) && p.skip(0)
	})
}

func (p *parser) usageInto(u **Usage) bool {
	if p.null() {
		*u = nil
		return true
	}
	v := new(Usage)
	var seen uint16
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return p.once(&seen, 0) && p.intInto(&v.PromptTokens)
		case "completion_tokens":
			return p.once(&seen, 1) && p.intInto(&v.CompletionTokens)
		case "total_tokens":
			return p.once(&seen, 2) && p.intInto(&v.TotalTokens)
		}
		return !foldsToAny(key, usageKeys) && p.skip(0)
	})
	*u = v
	return ok
}

// parser reads JSON from b at i. Its methods return false when the input
// is invalid or is not what the fast path handles.
type parser struct {
	b []byte
	i int
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (p *parser) peek() byte {
	p.space()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// once marks key number k of an object as seen and reports whether it
// was new: encoding/json merges repeated keys, the fast path does not.
func (p *parser) once(seen *uint16, k uint) bool {
	if *seen&(1<<k) != 0 {
		return false
	}
	*seen |= 1 << k
	return true
}

func (p *parser) literal(word string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(word)) {
		p.i += len(word)
		return true
	}
	return false
}

// null consumes a null if one comes next.
func (p *parser) null() bool {
	return p.peek() == 'n' && p.literal("null")
}

// object reads an object, calling field with each key (unescaped keys
// only) positioned before its value.
func (p *parser) object(field func(key []byte) bool) bool {
	if p.peek() != '{' {
		return false
	}
	p.i++
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		if p.peek() != '"' {
			return false
		}
		key, escaped, ok := p.rawString()
		if !ok || escaped {
			return false
		}
		if p.peek() != ':' {
			return false
		}
		p.i++
		if !field(key) {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem positioned before each element.
func (p *parser) array(elem func() bool) bool {
	if p.peek() != '[' {
		return false
	}
	p.i++
	if p.peek() == ']' {
		p.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

// rawString reads a string and returns its bytes between the quotes.
// escaped is set when it holds an escape sequence or invalid UTF-8, which
// only encoding/json turns into text. It checks the escapes are valid.
func (p *parser) rawString() (raw []byte, escaped, ok bool) {
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			raw = p.b[start:j]
			p.i = j + 1
			return raw, escaped || !utf8.Valid(raw), true
		case c == '\\':
			escaped = true
			j++
			if j >= len(p.b) {
				return nil, false, false
			}
			switch p.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(p.b) {
					return nil, false, false
				}
				for _, h := range p.b[j+1 : j+5] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				j += 4
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// stringInto reads a string into *s; null leaves *s as it is.
func (p *parser) stringInto(s *string) bool {
	switch p.peek() {
	case 'n':
		return p.literal("null")
	case '"':
	default:
		return false
	}
	start := p.i
	raw, escaped, ok := p.rawString()
	if !ok {
		return false
	}
	if !escaped {
		*s = string(raw)
		return true
	}
	// Escapes and invalid UTF-8 are rare in a chunk: encoding/json
	// unquotes them exactly.
	return json.Unmarshal(p.b[start:p.i], s) == nil
}

// cachedString is stringInto, reusing *last when the text is the same.
func (p *parser) cachedString(s, last *string) bool {
	if p.peek() == '"' {
		save := p.i
		raw, escaped, ok := p.rawString()
		if ok && !escaped && string(raw) == *last {
			*s = *last
			return true
		}
		p.i = save
	}
	if !p.stringInto(s) {
		return false
	}
	*last = *s
	return true
}

// intInto reads an integer into *v; null leaves *v as it is. A number
// with a fraction or an exponent, or too long to be sure it fits, is
// left to encoding/json.
func (p *parser) intInto(v *int) bool {
	switch c := p.peek(); {
	case c == 'n':
		return p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
	default:
		return false
	}
	neg := p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	n := 0
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		n = n*10 + int(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 18 || (digits > 1 && p.b[start] == '0') {
		return false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return false
		}
	}
	if neg {
		n = -n
	}
	*v = n
	return true
}

// intsInto reads an array of integers into *v (a new slice, empty but
// not nil for []); null sets it to nil.
func (p *parser) intsInto(v *[]int) bool {
	if p.null() {
		*v = nil
		return true
	}
	out := make([]int, 0, 8)
	ok := p.array(func() bool {
		if p.peek() == 'n' {
			return false // a null element: left to encoding/json
		}
		var n int
		if !p.intInto(&n) {
			return false
		}
		out = append(out, n)
		return true
	})
	*v = out
	return ok
}

// skip reads over one value of any type, checking that it is valid.
func (p *parser) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch c := p.peek(); {
	case c == '{':
		return p.object(func([]byte) bool { return p.skip(depth + 1) })
	case c == '[':
		return p.array(func() bool { return p.skip(depth + 1) })
	case c == '"':
		_, _, ok := p.rawString()
		return ok
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return false
}

// number reads over a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() bool {
	if p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		start := p.i
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
		}
		return p.i - start
	}
	start := p.i
	n := digits()
	if n == 0 || (n > 1 && p.b[start] == '0') {
		return false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

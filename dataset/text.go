package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeString decodes a JSON string literal from a line that is known to
// be valid JSON. encoding/json would silently replace invalid UTF-8 and
// unpaired surrogate escapes with U+FFFD; a prompt altered that way would
// be regenerated from text the dataset never held, so both are reported.
func decodeString(raw json.RawMessage, what string) (string, error) {
	if !utf8.Valid(raw) {
		return "", fmt.Errorf("invalid UTF-8 in %s", what)
	}
	s, lone, ok := unquote(raw)
	if lone {
		return "", fmt.Errorf("%s has an unpaired UTF-16 surrogate escape (\\ud800 to \\udfff): it is not valid Unicode text", what)
	}
	if !ok {
		// Not reached for valid JSON; encoding/json words the error.
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: %v", what, err)
		}
	}
	return s, nil
}

// unquote decodes a valid JSON string literal (quotes included). It gives
// what encoding/json gives, without validating the literal again (the
// whole line was), and reports an unpaired surrogate escape as lone. ok is
// false for a malformed literal.
func unquote(raw []byte) (s string, lone, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false, false
	}
	body := raw[1 : len(raw)-1]
	i := bytes.IndexByte(body, '\\')
	if i < 0 {
		return string(body), false, true
	}
	b := make([]byte, 0, len(body))
	for {
		b = append(b, body[:i]...)
		body = body[i:]
		if len(body) < 2 {
			return "", false, false
		}
		n := 2
		switch c := body[1]; c {
		case '"', '\\', '/':
			b = append(b, c)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, valid := hex4(body[2:])
			if !valid {
				return "", false, false
			}
			n = 6
			if utf16.IsSurrogate(r) {
				lo, paired := rune(0), false
				if r < 0xDC00 && len(body) >= 12 && body[6] == '\\' && body[7] == 'u' {
					lo, paired = hex4(body[8:])
					paired = paired && lo >= 0xDC00 && lo < 0xE000
				}
				if !paired {
					return "", true, false
				}
				r = utf16.DecodeRune(r, lo)
				n = 12
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", false, false
		}
		body = body[n:]
		i = bytes.IndexByte(body, '\\')
		if i < 0 {
			b = append(b, body...)
			return string(b), false, true
		}
	}
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

package dataset

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aerie-dev/aerie/schema"
)

// contentIDDomain starts every content digest, so that the digest of a
// prompt cannot equal one computed over the same bytes for another purpose,
// and so that a future encoding can be told apart by a new prefix.
const contentIDDomain = "aerie/content-id/v1\x00"

// ContentID is the id of a prompt given without one: "h" followed by the
// first 16 hex digits of the SHA-256 of contentIDDomain and then, for each
// message in order, its role and its content, each preceded by its length
// in bytes as an unsigned varint. The encoding is unambiguous and
// independent of JSON formatting, so the same conversation gets the same
// id on every produce, whatever file it comes from: producing again is
// recognised as a repeat.
func ContentID(msgs []schema.Message) string {
	h := sha256.New()
	h.Write([]byte(contentIDDomain))
	var n [binary.MaxVarintLen64]byte
	for _, m := range msgs {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(m.Role)))])
		h.Write([]byte(m.Role))
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(m.Content)))])
		h.Write([]byte(m.Content))
	}
	sum := h.Sum(nil)
	return "h" + hex.EncodeToString(sum[:8])
}

// ParseID reads an explicit id given as JSON: a string, or an integer,
// which is its decimal text as written ("-0" is "0"). Any other number
// (2.5, 1e3) is refused: such a number has no single text (2.5, 2.50 and
// 25e-1 are one value), so the id aerie wrote in its output files would
// not be the one in the input, and ids could not be matched by text in
// completions.jsonl, failed.jsonl or an ids file. The id may not be empty,
// longer than MaxIDBytes, or hold a control character (NUL included).
// Every reader of ids (input files, ids files, output lines) uses it, so
// an id is the same wherever it is read.
func ParseID(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("id is missing")
	}
	var id string
	switch c := raw[0]; {
	case c == '"':
		s, err := decodeString(raw, "id")
		if err != nil {
			return "", err
		}
		if s == "" {
			return "", errors.New("id is an empty string: give a non-empty id, or leave the field out to derive one from the content")
		}
		id = s
	case IsInteger(raw):
		id = string(raw)
		if id == "-0" {
			id = "0"
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return "", fmt.Errorf("id %s is a number that is not an integer: write it as a string (\"%s\"), which is kept as written", Truncate(string(raw), 40), Truncate(string(raw), 40))
	default:
		return "", fmt.Errorf("id must be a string or an integer, found %s", kindOf(raw))
	}
	return checkID(id)
}

// checkID checks an id's length and characters.
func checkID(id string) (string, error) {
	if len(id) > MaxIDBytes {
		return "", fmt.Errorf("id is longer than %d bytes (it has %d): shorten it, or leave it out to derive one from the content", MaxIDBytes, len(id))
	}
	if strings.IndexByte(id, 0) >= 0 {
		return "", errors.New(`id contains a NUL byte (\u0000): aerie tells the samples of a prompt apart by its id and a NUL separator, so ids cannot hold one; remove it, or leave the id out to derive one from the content`)
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return "", fmt.Errorf("id contains control characters (%U): ids travel in message headers, which cannot hold them", r)
		}
	}
	return id, nil
}

// IsInteger reports whether raw is a JSON integer: an optional minus
// sign and digits, with no fraction or exponent.
func IsInteger(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	if len(raw) == 0 {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Truncate shortens s to at most n bytes for a message, marking the cut
// with "...", which falls between two characters.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

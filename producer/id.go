package producer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

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

// parseID reads an explicit id: a string, or a number written as its
// decimal text.
func parseID(raw json.RawMessage) (string, error) {
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
	case c == '-' || (c >= '0' && c <= '9'):
		s, err := numberText(raw)
		if err != nil {
			return "", err
		}
		id = s
	default:
		return "", fmt.Errorf("id must be a string or number, found %s", kindOf(raw))
	}
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

// numberText turns a JSON number into its decimal text: integers as they
// are written (so that large ones keep every digit), other numbers in the
// shortest decimal form that reads back to the same value (1e3 is "1000",
// 2.50 is "2.5").
func numberText(raw json.RawMessage) (string, error) {
	if isInteger(raw) {
		if string(raw) == "-0" {
			return "0", nil
		}
		return string(raw), nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) {
		return "", fmt.Errorf("id %s is a number out of range: give the id as a string", truncate(string(raw), 40))
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10), nil
	}
	if math.Abs(f) < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}

// isInteger reports whether a JSON number has no fraction or exponent.
func isInteger(raw []byte) bool {
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

package producer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/aerie-dev/aerie/schema"
)

// The digests that tie a run to its prompt set. Each encoding starts with
// its own domain, so that no digest equals one computed over the same bytes
// for another purpose, and the run digest carries its version, so that a
// later encoding is told apart rather than taken for a different set.
const (
	promptDigestDomain  = "aerie/prompt-digest/v1\x00"
	promptsDigestDomain = "aerie/prompts-digest/v1\x00"
	// promptsDigestVersion starts every run digest written by this
	// encoding: "v1:" and 64 hex digits.
	promptsDigestVersion = "v1:"
)

// Tags of the fields of a prompt in its digest. Each field is its tag, its
// length in bytes as an unsigned varint and its bytes; a field is written
// only when the prompt carries it, in the order below. A per-prompt
// parameter added later gets a new tag, written only when set, so every
// prompt without it keeps its digest.
const (
	tagID        = 'i'
	tagRole      = 'r' // then tagContent: one pair per message, in order
	tagContent   = 'c'
	tagMaxTokens = 't' // decimal; only when positive
	tagParams    = 'p' // paramsBytes; only when the prompt has Params
	tagInputIDs  = 'x' // decimal ids, comma-separated; only for an extraction sample
	tagLossMask  = 'm' // 0s and 1s; only for an extraction sample
)

// promptDigest identifies what a queued prompt carries: its id, its
// messages and its per-prompt parameters (the input line's params, and
// MaxTokens, which only a replay sets), not where it came from (Source),
// its run or its sample. It is the first
// 16 bytes of a SHA-256: enough to tell an edited prompt from its original
// by accident (a collision needs about 2^64 prompts), and small, since the
// validation pass keeps one per prompt.
func promptDigest(p *schema.Prompt) [16]byte {
	h := sha256.New()
	h.Write([]byte(promptDigestDomain))
	var buf [binary.MaxVarintLen64]byte
	field := func(tag byte, value string) {
		h.Write([]byte{tag})
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(value)))])
		h.Write([]byte(value))
	}
	field(tagID, p.ID)
	for _, m := range p.Messages {
		field(tagRole, m.Role)
		field(tagContent, m.Content)
	}
	if p.MaxTokens > 0 {
		field(tagMaxTokens, strconv.Itoa(p.MaxTokens))
	}
	if p.Params != nil {
		field(tagParams, paramsBytes(p.Params))
	}
	if len(p.InputIDs) > 0 {
		b := make([]byte, 0, 8*len(p.InputIDs))
		for _, id := range p.InputIDs {
			b = strconv.AppendInt(b, id, 10)
			b = append(b, ',')
		}
		field(tagInputIDs, string(b))
		m := make([]byte, len(p.LossMask))
		for i, v := range p.LossMask {
			m[i] = '0' + byte(v&1)
		}
		field(tagLossMask, string(m))
	}
	var d [16]byte
	copy(d[:], h.Sum(nil))
	return d
}

// paramsBytes is the canonical form of per-prompt parameters in a digest:
// their JSON, whose field order is fixed by schema.Params and whose two
// objects (chat_template_kwargs, extra_body) are stored canonical, so
// that equal parameters give equal bytes.
func paramsBytes(p *schema.Params) string {
	b, err := json.Marshal(p)
	if err != nil {
		// Only a non-finite number or a malformed object fails, which
		// the parser refuses before any prompt is digested.
		return "unencodable: " + err.Error()
	}
	return string(b)
}

// promptsDigest is the digest of a run's prompt set: promptsDigestVersion
// and the hex SHA-256 of the count and the sorted per-prompt digests.
// Sorting makes it independent of the order of the lines in the file, so
// the same prompts shuffled, or produced from another host, give the same
// digest. The slice is sorted in place.
func promptsDigest(digests [][16]byte) string {
	rows := make(digestRows, 0, 16*len(digests))
	for _, d := range digests {
		rows = append(rows, d[:]...)
	}
	return rows.digest()
}

// digestRows are per-prompt digests, 16 bytes each, end to end: a form
// that can live outside the Go heap (see seenIDs).
type digestRows []byte

func (r digestRows) Len() int { return len(r) / 16 }

func (r digestRows) Less(i, j int) bool {
	return bytes.Compare(r[16*i:16*i+16], r[16*j:16*j+16]) < 0
}

func (r digestRows) Swap(i, j int) {
	var t [16]byte
	copy(t[:], r[16*i:16*i+16])
	copy(r[16*i:16*i+16], r[16*j:16*j+16])
	copy(r[16*j:16*j+16], t[:])
}

// digest is promptsDigest of the rows, which it sorts.
func (r digestRows) digest() string {
	sort.Sort(r)
	h := sha256.New()
	h.Write([]byte(promptsDigestDomain))
	var buf [binary.MaxVarintLen64]byte
	h.Write(buf[:binary.PutUvarint(buf[:], uint64(r.Len()))])
	h.Write(r)
	return promptsDigestVersion + hex.EncodeToString(h.Sum(nil))
}

// knownDigest reports whether a stored run digest was written by the
// encoding above and can be compared with one computed now.
func knownDigest(d string) bool {
	return strings.HasPrefix(d, promptsDigestVersion)
}

package lineindex

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"time"
)

// Suffix names the index of a file: completions.jsonl's is
// completions.jsonl.index.
const Suffix = ".index"

// PathOf is the path of the index of the file at path.
func PathOf(path string) string { return path + Suffix }

// The file is a sequence of frames: a 4-byte little-endian length, the
// payload, and the CRC-32C of the payload in 4 bytes. The first frame is
// the header; every other one holds records.
const (
	frameOverhead = 8
	// maxFrame bounds a frame's payload, so that a damaged length is not
	// taken for a huge allocation.
	maxFrame = 64 << 20
	// version is the format's version, in the header. A reader meeting
	// another one discards the index.
	version = 1
	// The payload's first byte says what the frame is.
	kindHeader  = 'H'
	kindRecords = 'R'
	// magic starts the header's payload.
	magic = "aerie line index"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of b, as a summary's CRC is of its line.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// A records frame's payload: kindRecords, then the end of the file's
// prefix that the index covers once the frame is read (uvarint), the
// file's modification time after the frame's lines were written (unix
// nanoseconds, varint), the number of records (uvarint) and the records.
//
// A record: the line's offset (uvarint), length (uvarint), CRC (4 bytes),
// id (string), sample, finish reason (string), a flags byte (truncated,
// simulated), turns, turns planned, prompt tokens, completion tokens,
// length hint, worker (string), TTFT and latency in ms (varints),
// finished_at (unix nanoseconds, varint; 0 for none), and the assistant
// turns (count, then tokens<<1 | cut for each). A string is its length
// (uvarint) and bytes; every number not said otherwise is a uvarint.

const (
	flagTruncated = 1 << iota
	flagSimulated
)

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendCount(b []byte, n int) []byte { return binary.AppendUvarint(b, uint64(max(n, 0))) }

func appendRecord(b []byte, s *Summary) []byte {
	b = binary.AppendUvarint(b, uint64(s.Offset))
	b = appendCount(b, s.Length)
	b = binary.LittleEndian.AppendUint32(b, s.CRC)
	b = appendString(b, s.ID)
	b = appendCount(b, s.Sample)
	b = appendString(b, s.FinishReason)
	var flags byte
	if s.Truncated {
		flags |= flagTruncated
	}
	if s.Simulated {
		flags |= flagSimulated
	}
	b = append(b, flags)
	for _, n := range []int{s.Turns, s.TurnsPlanned, s.PromptTokens, s.CompletionTokens, s.LengthHint} {
		b = appendCount(b, n)
	}
	b = appendString(b, s.Worker)
	b = binary.AppendVarint(b, s.TTFTMillis)
	b = binary.AppendVarint(b, s.LatencyMs)
	var at int64
	if !s.FinishedAt.IsZero() {
		at = s.FinishedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = appendCount(b, len(s.Assistants))
	for _, t := range s.Assistants {
		v := uint64(max(t.CompletionTokens, 0)) << 1
		if t.Cut {
			v |= 1
		}
		b = binary.AppendUvarint(b, v)
	}
	return b
}

var errShort = errors.New("record cut short")

// decoder reads a payload; the first error sticks, and every read after
// it returns zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count is a uvarint that must fit an int.
func (d *decoder) count() int {
	v := d.uvarint()
	if v > 1<<53 {
		d.err = errors.New("a count out of range")
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = errShort
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes(d.count())) }

func (d *decoder) byte() byte {
	b := d.bytes(1)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// record decodes one record into s, reusing its Assistants.
func (d *decoder) record(s *Summary) {
	s.Offset = int64(d.count())
	s.Length = d.count()
	if c := d.bytes(4); len(c) == 4 {
		s.CRC = binary.LittleEndian.Uint32(c)
	}
	s.ID = d.string()
	s.Sample = d.count()
	s.FinishReason = d.string()
	flags := d.byte()
	s.Truncated, s.Simulated = flags&flagTruncated != 0, flags&flagSimulated != 0
	s.Turns, s.TurnsPlanned, s.PromptTokens = d.count(), d.count(), d.count()
	s.CompletionTokens, s.LengthHint = d.count(), d.count()
	s.Worker = d.string()
	s.TTFTMillis, s.LatencyMs = d.varint(), d.varint()
	s.FinishedAt = time.Time{}
	if at := d.varint(); at != 0 {
		s.FinishedAt = time.Unix(0, at).UTC()
	}
	n := d.count()
	if n > len(d.b) {
		d.err = errShort
		return
	}
	s.Assistants = s.Assistants[:0]
	for range n {
		v := d.uvarint()
		s.Assistants = append(s.Assistants, Turn{CompletionTokens: int(v >> 1), Cut: v&1 != 0})
	}
	if len(s.Assistants) == 0 {
		s.Assistants = nil
	}
}

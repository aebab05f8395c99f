package producer

import (
	"encoding/binary"
	"math"
)

// seenIDs is the set of a file's prompt ids, each by its subject token
// (tokenOf), with what the validation pass found of it (seenID). The
// publishing pass looks every line up in it, so it lives as long as the
// produce: at a million prompts a Go map of seenID took 112 MiB of heap
// (measured), about twice that in resident memory with the collector's
// headroom. Here each id is one packed record of 40 bytes plus its slot
// in an open-addressing table of uint32 indexes kept at most half full,
// about 50 bytes an id. The zero value is empty and ready to use.
type seenIDs struct {
	recs []seenRec
	// slots holds, for each hash slot, 1 + the index in recs of the id
	// there, 0 for a free slot; its length is a power of two, at least
	// twice len(recs).
	slots []uint32
}

// seenRec is one id's record: its token and its seenID, packed.
type seenRec struct {
	key    [16]byte
	digest [16]byte
	line   uint32
	flags  uint8
}

const (
	seenDerived uint8 = 1 << iota
	seenRejected
)

// maxSeenLine is the last line number a seenIDs can hold.
const maxSeenLine = math.MaxUint32

// get returns what was recorded for key.
func (s *seenIDs) get(key [16]byte) (seenID, bool) {
	i, ok := s.find(key)
	if !ok {
		return seenID{}, false
	}
	r := &s.recs[i]
	return seenID{line: int(r.line), digest: r.digest, derived: r.flags&seenDerived != 0, rejected: r.flags&seenRejected != 0}, true
}

// put records e for key, which must not be recorded yet, and e.line
// must be at most maxSeenLine.
func (s *seenIDs) put(key [16]byte, e seenID) {
	if 2*(len(s.recs)+1) > len(s.slots) {
		s.grow()
	}
	r := seenRec{key: key, digest: e.digest, line: uint32(e.line)}
	if e.derived {
		r.flags |= seenDerived
	}
	if e.rejected {
		r.flags |= seenRejected
	}
	s.recs = append(s.recs, r)
	s.place(len(s.recs) - 1)
}

// each calls f with every id's record, in the order they were put.
func (s *seenIDs) each(f func(seenID)) {
	for i := range s.recs {
		r := &s.recs[i]
		f(seenID{line: int(r.line), digest: r.digest, derived: r.flags&seenDerived != 0, rejected: r.flags&seenRejected != 0})
	}
}

// home is the first slot to look at for key. Tokens are SHA-256 bytes,
// so any eight of them are as good a hash as any.
func (s *seenIDs) home(key [16]byte) int {
	return int(binary.LittleEndian.Uint64(key[:8]) & uint64(len(s.slots)-1))
}

// find returns the index in recs of key.
func (s *seenIDs) find(key [16]byte) (int, bool) {
	if len(s.slots) == 0 {
		return 0, false
	}
	mask := len(s.slots) - 1
	for i := s.home(key); ; i = (i + 1) & mask {
		v := s.slots[i]
		if v == 0 {
			return 0, false
		}
		if s.recs[v-1].key == key {
			return int(v - 1), true
		}
	}
}

// place puts recs[i] in its slot (linear probing).
func (s *seenIDs) place(i int) {
	mask := len(s.slots) - 1
	j := s.home(s.recs[i].key)
	for s.slots[j] != 0 {
		j = (j + 1) & mask
	}
	s.slots[j] = uint32(i + 1)
}

// grow doubles the table (1,024 slots at first) and places every record
// again.
func (s *seenIDs) grow() {
	s.slots = make([]uint32, max(1024, 2*len(s.slots)))
	for i := range s.recs {
		s.place(i)
	}
}

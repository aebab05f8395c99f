package producer

import (
	"encoding/binary"
	"math"
)

// seenIDs is the set of a file's prompt ids, each by its subject token
// (tokenOf), with what the validation pass found of it (seenID). The
// publishing pass looks every line up in it, so it lives as long as the
// produce: at a million prompts a Go map of seenID took 112 MiB of heap
// (measured). Here each id is one packed record of 37 bytes plus its
// slot in an open-addressing table of uint32 indexes kept at most half
// full: about 45 bytes an id.
//
// Both live outside the Go heap (offHeap). In it they were nine tenths
// of the producer's live heap, and the collector lets the heap grow to
// twice what is live before it collects the garbage of parsing a
// million lines: the table cost twice its size in resident memory, and
// the producer peaked at 190 MB for 49 MB of ids. The records hold no
// pointers, so the collector has nothing to find there.
//
// The zero value is empty and ready to use; release gives the memory
// back (a seenIDs that becomes unreachable unreleased keeps it until
// the process ends).
type seenIDs struct {
	// blocks hold the records in the order they were put, blockRecs
	// each, so that growing never copies them.
	blocks [][]byte
	n      int
	// slots holds, for each hash slot, 1 + the index of the id there
	// (uint32, little-endian), 0 for a free slot; their number is a
	// power of two, at least twice n.
	slots  []byte
	nslots int
	// frees gives back the memory of each block, then of slots.
	frees     []func()
	freeSlots func()
}

// A record: the token (16 bytes), the digest (16), the line (uint32,
// little-endian) and the flags.
const (
	recDigest = 16
	recLine   = 32
	recFlags  = 36
	recSize   = 37
	// blockRecs is the records of one block: 2.4 MB, touched page by
	// page as records come, so a small file costs a page, not a block.
	blockRecs = 1 << 16
)

const (
	seenDerived uint8 = 1 << iota
	seenRejected
)

// maxSeenLine is the last line number a seenIDs can hold.
const maxSeenLine = math.MaxUint32

func (s *seenIDs) rec(i int) []byte {
	o := (i % blockRecs) * recSize
	return s.blocks[i/blockRecs][o : o+recSize]
}

func (s *seenIDs) slot(i int) uint32 { return binary.LittleEndian.Uint32(s.slots[4*i:]) }

func (s *seenIDs) setSlot(i int, v uint32) { binary.LittleEndian.PutUint32(s.slots[4*i:], v) }

// get returns what was recorded for key.
func (s *seenIDs) get(key [16]byte) (seenID, bool) {
	i, ok := s.find(key)
	if !ok {
		return seenID{}, false
	}
	return decodeSeen(s.rec(i)), true
}

func decodeSeen(r []byte) seenID {
	e := seenID{line: int(binary.LittleEndian.Uint32(r[recLine:])), derived: r[recFlags]&seenDerived != 0, rejected: r[recFlags]&seenRejected != 0}
	copy(e.digest[:], r[recDigest:recLine])
	return e
}

// put records e for key, which must not be recorded yet, and e.line
// must be at most maxSeenLine.
func (s *seenIDs) put(key [16]byte, e seenID) {
	if 2*(s.n+1) > s.nslots {
		s.grow()
	}
	if s.n == len(s.blocks)*blockRecs {
		b, free := offHeap(blockRecs * recSize)
		s.blocks = append(s.blocks, b)
		s.frees = append(s.frees, free)
	}
	r := s.rec(s.n)
	copy(r, key[:])
	copy(r[recDigest:], e.digest[:])
	binary.LittleEndian.PutUint32(r[recLine:], uint32(e.line))
	var flags uint8
	if e.derived {
		flags |= seenDerived
	}
	if e.rejected {
		flags |= seenRejected
	}
	r[recFlags] = flags
	s.n++
	s.place(s.n - 1)
}

// len is the number of ids recorded.
func (s *seenIDs) len() int { return s.n }

// each calls f with every id's record, in the order they were put.
func (s *seenIDs) each(f func(seenID)) {
	for i := range s.n {
		f(decodeSeen(s.rec(i)))
	}
}

// home is the first slot to look at for key. Tokens are SHA-256 bytes,
// so any eight of them are as good a hash as any.
func (s *seenIDs) home(key []byte) int {
	return int(binary.LittleEndian.Uint64(key[:8]) & uint64(s.nslots-1))
}

// find returns the index of key's record.
func (s *seenIDs) find(key [16]byte) (int, bool) {
	if s.nslots == 0 {
		return 0, false
	}
	mask := s.nslots - 1
	for i := s.home(key[:]); ; i = (i + 1) & mask {
		v := s.slot(i)
		if v == 0 {
			return 0, false
		}
		if [16]byte(s.rec(int(v - 1))[:16]) == key {
			return int(v - 1), true
		}
	}
}

// place puts record i in its slot (linear probing).
func (s *seenIDs) place(i int) {
	mask := s.nslots - 1
	j := s.home(s.rec(i))
	for s.slot(j) != 0 {
		j = (j + 1) & mask
	}
	s.setSlot(j, uint32(i+1))
}

// grow doubles the table (1,024 slots at first) and places every record
// again.
func (s *seenIDs) grow() {
	if s.freeSlots != nil {
		s.freeSlots()
	}
	s.nslots = max(1024, 2*s.nslots)
	s.slots, s.freeSlots = offHeap(4 * s.nslots)
	for i := range s.n {
		s.place(i)
	}
}

// release gives the memory back and leaves s empty.
func (s *seenIDs) release() {
	for _, free := range s.frees {
		free()
	}
	if s.freeSlots != nil {
		s.freeSlots()
	}
	*s = seenIDs{}
}

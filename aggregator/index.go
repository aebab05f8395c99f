package aggregator

import (
	"errors"
	"hash/maphash"
	"math/bits"
)

// unitIndex is the set of units (schema.Unit.Key) that have a line in an
// output file, kept without the keys themselves: a run of a million
// prompts would otherwise hold a million id strings in a map (about 72
// bytes a key with 8-character ids, more with longer ones). It holds, for
// each line, where the line starts in the file (8 bytes), and a slot of an
// open-addressing table (8 bytes, at most three quarters of the slots in
// use): between 19 and 31 bytes a unit whatever the length of its id,
// 25 at a million units, where a map of 8-character ids takes 64 and one
// of 36-character ids 104 (BenchmarkUnitSet).
//
// A slot holds the upper 32 bits of the key's hash and the line's number.
// Equal hash bits only make a line a candidate: find reads the candidate
// line's unit back from the file and compares keys, so a hash collision
// costs a read, never a unit taken for written when it is not (which
// would lose its answer) nor the other way round (which would write it
// twice). With a well-mixed 64-bit hash, a lookup of a new unit meets a
// candidate line about once in ten thousand at a million lines
// (BenchmarkUnitSet's reads/lookup): the 32 bits kept less the ones the
// slot's position already fixes.
//
// The zero value is an empty index hashing with a seed of its own, drawn
// at first use (the index is rebuilt from the file at every start, so the
// seed need not last).
type unitIndex struct {
	// slots is the table, linear probing, its length a power of two
	// (or zero before the first add): 0 is an empty slot, otherwise
	// hashHigh<<32 | line+1.
	slots []uint64
	// offsets is where each line starts in the file, by line number.
	offsets []int64
	// hash hashes a key; nil means maphash with seed. Tests set a tiny
	// one to force collisions.
	hash func(string) uint64
	// shift turns a hash into its home slot: 32 less log2(len(slots)).
	shift  uint
	seed   maphash.Seed
	seeded bool
}

// maxIndexLines bounds the lines an index holds, so that line numbers fit
// their 32 bits and the table's positions the hash's 32.
const maxIndexLines = 3 << 30

var errIndexFull = errors.New("more than 3,221,225,472 lines in one output file: start a new run for the rest")

func (x *unitIndex) hashOf(key string) uint32 {
	if x.hash != nil {
		return uint32(x.hash(key) >> 32)
	}
	if !x.seeded {
		x.seed, x.seeded = maphash.MakeSeed(), true
	}
	return uint32(maphash.String(x.seed, key) >> 32)
}

// len is the number of units in the index.
func (x *unitIndex) len() int { return len(x.offsets) }

// home is the first slot a hash probes: its top bits, as many as the
// table's size needs.
func (x *unitIndex) home(h uint32) int { return int(h >> x.shift) }

// find reports whether key is in the index. keyAt reads the key of the
// line that starts at an offset; it is called only for lines whose hash
// bits match, to confirm them.
func (x *unitIndex) find(key string, keyAt func(off int64) (string, error)) (bool, error) {
	if len(x.slots) == 0 {
		return false, nil
	}
	h := x.hashOf(key)
	mask := len(x.slots) - 1
	// The table is never full, so an empty slot ends the probe.
	for i := x.home(h); x.slots[i] != 0; i = (i + 1) & mask {
		s := x.slots[i]
		if uint32(s>>32) != h {
			continue
		}
		line := uint32(s) - 1
		k, err := keyAt(x.offsets[line])
		if err != nil {
			return false, err
		}
		if k == key {
			return true, nil
		}
	}
	return false, nil
}

// add records the line of key, which starts at off. key must not be in
// the index already (find said so).
func (x *unitIndex) add(key string, off int64) error {
	if int64(len(x.offsets)) >= maxIndexLines {
		return errIndexFull
	}
	if (len(x.offsets)+1)*4 > len(x.slots)*3 {
		x.grow()
	}
	x.offsets = append(x.offsets, off)
	x.place(uint64(x.hashOf(key))<<32 | uint64(len(x.offsets)))
	return nil
}

// place puts slot value s in the first empty slot of its probe.
func (x *unitIndex) place(s uint64) {
	mask := len(x.slots) - 1
	i := x.home(uint32(s >> 32))
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = s
}

// grow doubles the table (16 slots at first).
func (x *unitIndex) grow() {
	x.resize(max(16, 2*len(x.slots)))
}

// maxReserve bounds what reserve sizes up front: about 100 MiB of index
// for 4 million units. A larger run grows past it as lines come, so that
// a manifest's total, however large, never allocates more at once.
const maxReserve = 1 << 22

// reserve sizes the index for n units (at most maxReserve) at once: the
// table to the power of two that n keeps at most three quarters full,
// and room for n offsets. Growing to a million units one doubling at a
// time copies the table and the offsets some twenty times, and leaves
// the copies to the garbage collector.
func (x *unitIndex) reserve(n int) {
	n = min(n, maxReserve)
	if n <= 0 {
		return
	}
	if cap(x.offsets) < n {
		offsets := make([]int64, len(x.offsets), n)
		copy(offsets, x.offsets)
		x.offsets = offsets
	}
	size := max(16, len(x.slots))
	for n*4 > size*3 {
		size *= 2
	}
	if size > len(x.slots) {
		x.resize(size)
	}
}

// resize makes the table size slots (a power of two) and places every
// slot again: the slots hold the hash bits their positions are made of,
// so no key is read.
func (x *unitIndex) resize(size int) {
	old := x.slots
	x.slots = make([]uint64, size)
	x.shift = uint(32 - bits.Len(uint(len(x.slots))) + 1)
	for _, s := range old {
		if s != 0 {
			x.place(s)
		}
	}
}

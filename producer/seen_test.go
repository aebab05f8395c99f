package producer

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// seenIDs answers as a map of seenID would, through growth, for tokens
// as they come (SHA-256 bytes) and for tokens that all start alike, whose
// slots collide.
func TestSeenIDsMatchesMap(t *testing.T) {
	for name, key := range map[string]func(i int) [16]byte{
		"tokens": func(i int) [16]byte { return tokenOf(fmt.Sprintf("id-%d", i)) },
		"colliding": func(i int) [16]byte {
			var k [16]byte // the same first 8 bytes: one home slot for all
			binary.LittleEndian.PutUint64(k[8:], uint64(i)+1)
			return k
		},
	} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var s seenIDs
			want := map[[16]byte]seenID{}
			var order [][16]byte
			n := blockRecs + 5000 // into a second block
			if name == "colliding" {
				n = 1500 // every lookup walks the run of slots
			}
			for i := range n {
				k := key(i)
				if _, ok := s.get(k); ok {
					t.Fatalf("id %d found before it was put", i)
				}
				e := seenID{line: rng.IntN(maxSeenLine) + 1, derived: rng.IntN(2) == 0, rejected: rng.IntN(5) == 0}
				binary.LittleEndian.PutUint64(e.digest[:], rng.Uint64())
				binary.LittleEndian.PutUint64(e.digest[8:], rng.Uint64())
				s.put(k, e)
				want[k] = e
				order = append(order, k)
				// An id put earlier is still found as it was.
				j := rng.IntN(i + 1)
				if got, ok := s.get(key(j)); !ok || got != want[key(j)] {
					t.Fatalf("after %d puts, id %d: %+v %v, want %+v", i+1, j, got, ok, want[key(j)])
				}
			}
			if s.len() != len(want) {
				t.Fatalf("%d ids, want %d", s.len(), len(want))
			}
			for k, e := range want {
				if got, ok := s.get(k); !ok || got != e {
					t.Fatalf("id %x: %+v %v, want %+v", k, got, ok, e)
				}
			}
			i := 0
			s.each(func(e seenID) {
				if e != want[order[i]] {
					t.Fatalf("record %d: %+v, want %+v", i, e, want[order[i]])
				}
				i++
			})
			if i != len(want) {
				t.Fatalf("each saw %d records, want %d", i, len(want))
			}
			if _, ok := s.get(key(n)); ok {
				t.Fatal("an id never put is found")
			}
		})
	}
	var empty seenIDs
	if _, ok := empty.get(tokenOf("x")); ok || empty.len() != 0 {
		t.Fatal("the zero value is not empty")
	}
}

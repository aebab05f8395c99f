package aggregator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// indexHashes are the hash functions the index is tested with: its own,
// and tiny ones under which most or all keys collide, so that every
// lookup goes through reading candidate lines back.
var indexHashes = map[string]func(string) uint64{
	"maphash":  nil,
	"two bits": func(k string) uint64 { return uint64(len(k)%4) << 62 },
	"constant": func(string) uint64 { return 0 },
}

// The index answers as a map of the keys would, in memory, with keys
// read back from where they were added.
func TestUnitIndexMatchesMap(t *testing.T) {
	for name, hash := range indexHashes {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			x := unitIndex{hash: hash}
			want := map[string]bool{}
			var stored []string // by offset
			keyAt := func(off int64) (string, error) { return stored[off], nil }
			n := 3000
			if hash != nil {
				n = 600 // every lookup reads every line back
			}
			for range n {
				key := randomUnit(rng).Key()
				got, err := x.find(key, keyAt)
				if err != nil {
					t.Fatal(err)
				}
				if got != want[key] {
					t.Fatalf("find(%q) = %v, want %v", key, got, want[key])
				}
				if !got {
					if err := x.add(key, int64(len(stored))); err != nil {
						t.Fatal(err)
					}
					stored = append(stored, key)
					want[key] = true
				}
			}
			if x.len() != len(want) {
				t.Errorf("%d units in the index, want %d", x.len(), len(want))
			}
			for key := range want {
				if ok, _ := x.find(key, keyAt); !ok {
					t.Errorf("%q lost", key)
				}
			}
		})
	}
}

// An output file's index, across appends, reopening (rebuilt from the
// file), torn last lines and rewrites that drop and replace lines, says
// of every unit what a map of the written keys says, and the file holds
// each of them exactly once; under tiny hashes too, where a hash match
// must be confirmed from the file.
func TestJSONLIndexProperty(t *testing.T) {
	for name, hash := range indexHashes {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			path := filepath.Join(t.TempDir(), "out.jsonl")
			// A line as an older aerie or a hand may have written it:
			// no sample, a CRLF ending.
			if err := os.WriteFile(path, []byte(`{"id":"old"}`+"\r\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{"old": true}
			open := func() *jsonlFile {
				j, err := openIndexed(path, nil, hash)
				if err != nil {
					t.Fatal(err)
				}
				return j
			}
			j := open()
			defer func() { j.Close() }()
			check := func(key string) {
				t.Helper()
				got, err := j.has(key)
				if err != nil {
					t.Fatal(err)
				}
				if got != want[key] {
					t.Fatalf("has(%q) = %v, want %v", key, got, want[key])
				}
			}
			rounds := 150
			if hash != nil {
				rounds = 60 // every lookup reads every line back
			}
			for round := range rounds {
				switch op := rng.IntN(10); {
				case op < 6: // a batch of results, some of them redelivered
					var buf bytes.Buffer
					var keys []string
					seen := map[string]bool{}
					for range 1 + rng.IntN(12) {
						u := randomUnit(rng)
						if len(want) > 0 && rng.IntN(3) == 0 {
							u = unitOfKey(anyKey(rng, want))
						}
						key := u.Key()
						check(key)
						if want[key] || seen[key] {
							continue
						}
						seen[key] = true
						buf.Write(unitLine(t, u))
						keys = append(keys, key)
					}
					if err := j.appendLines(&buf, keys, nil); err != nil {
						t.Fatal(err)
					}
					for _, k := range keys {
						want[k] = true
					}
				case op < 7: // a crash in the middle of a write, then a restart
					j.Close()
					f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
					if err != nil {
						t.Fatal(err)
					}
					torn := unitLine(t, randomUnit(rng))
					f.Write(torn[:rng.IntN(len(torn)-1)])
					f.Close()
					j = open()
				case op < 8: // a restart
					j.Close()
					j = open()
				default: // a rewrite, as failed.jsonl has
					drop := map[string]bool{}
					replace := map[string][]byte{}
					for range rng.IntN(4) {
						if len(want) > 0 {
							drop[anyKey(rng, want)] = true
						}
					}
					if len(want) > 0 {
						k := anyKey(rng, want)
						if !drop[k] {
							u := unitOfKey(k)
							replace[k] = unitLine(t, u)
						}
					}
					if err := j.rewrite(drop, replace); err != nil {
						t.Fatal(err)
					}
					for k := range drop {
						delete(want, k)
					}
				}
				if j.count() != len(want) {
					t.Fatalf("round %d: count %d, want %d", round, j.count(), len(want))
				}
				for range 5 {
					check(randomUnit(rng).Key())
				}
			}
			for k := range want {
				check(k)
			}
			j.Close()
			j = open()
			if j.count() != len(want) {
				t.Errorf("reopened: count %d, want %d", j.count(), len(want))
			}
			lines := fileKeys(t, path)
			if len(lines) != len(want) {
				t.Errorf("the file has %d lines for %d units", len(lines), len(want))
			}
			for _, k := range lines {
				if !want[k] {
					t.Errorf("the file has a line of %q, which is not written", k)
				}
			}
		})
	}
}

// A unit with a second line in a file (put together by hand) counts
// once; reading it back fails with the file named when the line a hash
// points to is gone.
func TestJSONLIndexDuplicatesAndUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	body := `{"id":"a","sample":0}` + "\n" + `{"id":"b","sample":0}` + "\n" + `{"id":"a","sample":0}` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := openIndexed(path, nil, indexHashes["constant"])
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if j.count() != 2 {
		t.Errorf("count %d, want 2", j.count())
	}
	if err := j.f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := j.has("c"); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("has after the file was emptied: %v, want an error naming %s", err, path)
	}
}

// randomUnit is a unit with a short id from a small alphabet, so that ids
// share prefixes and lengths, and now and then a sample above 0.
func randomUnit(rng *rand.Rand) schema.Unit {
	const alphabet = "ab01-é"
	var id strings.Builder
	for range 1 + rng.IntN(6) {
		id.WriteString(string([]rune(alphabet)[rng.IntN(6)]))
	}
	u := schema.Unit{ID: id.String()}
	if rng.IntN(3) == 0 {
		u.Sample = rng.IntN(4)
	}
	return u
}

func anyKey(rng *rand.Rand, m map[string]bool) string {
	i := rng.IntN(len(m))
	for k := range m {
		if i == 0 {
			return k
		}
		i--
	}
	panic("not reached")
}

func unitLine(t *testing.T, u schema.Unit) []byte {
	t.Helper()
	id, err := json.Marshal(u.ID)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, `{"id":%s,"sample":%d,"content":"x"}`+"\n", id, u.Sample)
}

func fileKeys(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		u, _, err := dataset.LineUnit(bytes.TrimSuffix(line, []byte("\r")))
		if err != nil {
			t.Fatalf("%s: %q: %v", path, line, err)
		}
		keys = append(keys, u.Key())
	}
	return keys
}

// BenchmarkUnitSet reports the heap a set of a million units takes, as
// the map of keys the aggregator kept before and as its index: bytes a
// unit (B/unit), ids of 8 characters (like gen-prompts') and of 36 (UUIDs).
// For the index it also reports how often a lookup of a new unit has a
// candidate line to read back (reads/lookup).
func BenchmarkUnitSet(b *testing.B) {
	const n = 1_000_000
	for _, idLen := range []int{8, 36} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%0*d", idLen, i)
		}
		b.Run(fmt.Sprintf("map/id%d", idLen), func(b *testing.B) {
			for range b.N {
				before := heapInUse()
				m := make(map[string]struct{})
				for _, k := range keys {
					m[string([]byte(k))] = struct{}{} // a key of its own, as decoded from a message
				}
				b.ReportMetric(float64(heapInUse()-before)/n, "B/unit")
				runtime.KeepAlive(m)
			}
		})
		for _, reserved := range []bool{false, true} {
			name := "index"
			if reserved {
				name = "index-reserved" // sized from the run's total, as the aggregator does
			}
			b.Run(fmt.Sprintf("%s/id%d", name, idLen), func(b *testing.B) {
				for range b.N {
					before, allocBefore := heapInUse(), totalAlloc()
					var x unitIndex
					if reserved {
						x.reserve(n)
					}
					reads := 0
					keyAt := func(off int64) (string, error) { reads++; return keys[off], nil }
					for i, k := range keys {
						if ok, _ := x.find(k, keyAt); !ok {
							_ = x.add(k, int64(i))
						}
					}
					b.ReportMetric(float64(heapInUse()-before)/n, "B/unit")
					b.ReportMetric(float64(totalAlloc()-allocBefore)/n, "allocated-B/unit")
					b.ReportMetric(float64(reads)/n, "reads/lookup")
					runtime.KeepAlive(&x)
				}
			})
		}
	}
}

func totalAlloc() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.TotalAlloc)
}

// An index reserved for n units takes n without growing, keeps what it
// held before, and finds every unit; a reservation beyond maxReserve is
// held to it.
func TestIndexReserve(t *testing.T) {
	const n = 5000
	var x unitIndex
	for i := range 10 {
		if err := x.add(fmt.Sprint(i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	x.reserve(n)
	slots, offsets := len(x.slots), cap(x.offsets)
	if slots*3 < n*4 || offsets < n {
		t.Fatalf("reserved %d slots and room for %d offsets, want room for %d units", slots, offsets, n)
	}
	for i := 10; i < n; i++ {
		if err := x.add(fmt.Sprint(i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(x.slots) != slots || cap(x.offsets) != offsets {
		t.Errorf("grew to %d slots and %d offsets after reserving %d and %d", len(x.slots), cap(x.offsets), slots, offsets)
	}
	keyAt := func(off int64) (string, error) { return fmt.Sprint(off), nil }
	for i := range n {
		if ok, err := x.find(fmt.Sprint(i), keyAt); !ok || err != nil {
			t.Fatalf("unit %d not found after reserve: %v", i, err)
		}
	}
	if ok, _ := x.find("absent", keyAt); ok {
		t.Error("a unit never added was found")
	}
	var big unitIndex
	big.reserve(maxIndexLines)
	if cap(big.offsets) != maxReserve || len(big.slots)*3 < maxReserve*4 || len(big.slots) > 2*maxReserve*4/3+16 {
		t.Errorf("a reservation of %d made %d slots and %d offsets, want it held to %d units", maxIndexLines, len(big.slots), cap(big.offsets), maxReserve)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

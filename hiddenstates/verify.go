package hiddenstates

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Tensor names in an extraction file, as vLLM's hidden-states connector
// writes them and speculators reads them.
const (
	KeyHiddenStates = "hidden_states"
	KeyTokenIDs     = "token_ids"
)

// maxHeader bounds the JSON header read before anything is checked: an
// extraction file's has two tensors and holds a few hundred bytes, so a
// larger one is a broken or foreign file, refused before it is read.
const maxHeader = 1 << 20

// chunk is the buffer a file is read through: the most a verification
// holds in memory, whatever the file's size.
const chunk = 1 << 20

// Want is what a sample's file must hold: its prompt's token ids, and the
// run's layer count, hidden size and dtype.
type Want struct {
	TokenIDs []int64
	Layers   int
	Hidden   int
	// DType is the hidden states' safetensors dtype: BF16, F16 or F32.
	DType string
}

// Summary is what a verified file is: its size, its SHA-256, and its
// hidden states' shape and dtype.
type Summary struct {
	Bytes  int64
	SHA256 string
	// Shape is [tokens, layers, hidden].
	Shape [3]int
	DType string
}

// Error is a file that is not what its sample needs; Why says how.
type Error struct{ Why string }

func (e *Error) Error() string { return "hidden-states file: " + e.Why }

func bad(format string, args ...any) error { return &Error{Why: fmt.Sprintf(format, args...)} }

// tensor is one entry of a safetensors header.
type tensor struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// dtypeSize is the bytes of one element of each dtype a file may hold.
var dtypeSize = map[string]int64{"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4}

// Verify reads a whole extraction file from r as a stream, holding at
// most one chunk of it, and checks it against w: a safetensors header of
// exactly hidden_states [tokens, layers, hidden] in w's dtype and
// token_ids [tokens] (I64 or I32) equal to w's, their data laid end to
// end with nothing before, between or after, and every hidden-state
// value finite. It returns the file's size and checksum; a file that is
// not right is an *Error, a failure to read it the reader's error.
func Verify(r io.Reader, w Want) (Summary, error) {
	if _, ok := floatMask[w.DType]; !ok {
		return Summary{}, fmt.Errorf("verify hidden states: dtype %q: use BF16, F16 or F32", w.DType)
	}
	h := sha256.New()
	tee := io.TeeReader(r, h)
	var lenBuf [8]byte
	if _, err := io.ReadFull(tee, lenBuf[:]); err != nil {
		return Summary{}, short(err, "the header's length")
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n == 0 || n > maxHeader {
		return Summary{}, bad("header of %d bytes: not a safetensors file of hidden states", n)
	}
	header := make([]byte, n)
	if _, err := io.ReadFull(tee, header); err != nil {
		return Summary{}, short(err, "the header")
	}
	hs, ids, err := parseHeader(header, w)
	if err != nil {
		return Summary{}, err
	}
	buf := make([]byte, chunk)
	// The two tensors in the order of their data.
	first, second := hs, ids
	if ids.Offsets[0] < hs.Offsets[0] {
		first, second = ids, hs
	}
	hsFirst := first.Offsets == hs.Offsets
	for i, t := range []tensor{first, second} {
		size := t.Offsets[1] - t.Offsets[0]
		if (i == 0) == hsFirst {
			err = checkFinite(tee, buf, size, w.DType)
		} else {
			err = checkIDs(tee, buf, size, t.DType, w.TokenIDs)
		}
		if err != nil {
			return Summary{}, err
		}
	}
	if k, err := tee.Read(buf[:1]); k > 0 {
		return Summary{}, bad("bytes after the end of the last tensor")
	} else if err != nil && err != io.EOF {
		return Summary{}, err
	}
	total := int64(8) + int64(n) + second.Offsets[1]
	return Summary{Bytes: total, SHA256: hex.EncodeToString(h.Sum(nil)),
		Shape: [3]int{len(w.TokenIDs), w.Layers, w.Hidden}, DType: w.DType}, nil
}

// short is what a read that ended early means: a file cut short.
func short(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return bad("cut short in %s", what)
	}
	return err
}

// parseHeader checks the header against w and returns its two tensors.
func parseHeader(header []byte, w Want) (hs, ids tensor, err error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimRight(header, " "), &raw); err != nil {
		return hs, ids, bad("header is not JSON: %v", err)
	}
	delete(raw, "__metadata__")
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range raw {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(keys, []string{KeyHiddenStates, KeyTokenIDs}) {
		return hs, ids, bad("tensors %q, want exactly %s and %s", keys, KeyHiddenStates, KeyTokenIDs)
	}
	for _, kt := range []struct {
		key string
		t   *tensor
	}{{KeyHiddenStates, &hs}, {KeyTokenIDs, &ids}} {
		if err := json.Unmarshal(raw[kt.key], kt.t); err != nil {
			return hs, ids, bad("tensor %s: %v", kt.key, err)
		}
	}
	tokens := int64(len(w.TokenIDs))
	if hs.DType != w.DType {
		return hs, ids, bad("%s dtype %s, want %s", KeyHiddenStates, hs.DType, w.DType)
	}
	if want := []int64{tokens, int64(w.Layers), int64(w.Hidden)}; !slices.Equal(hs.Shape, want) {
		return hs, ids, bad("%s shape %v, want %v (tokens, layers, hidden)", KeyHiddenStates, hs.Shape, want)
	}
	if ids.DType != "I64" && ids.DType != "I32" {
		return hs, ids, bad("%s dtype %s, want I64", KeyTokenIDs, ids.DType)
	}
	if !slices.Equal(ids.Shape, []int64{tokens}) {
		return hs, ids, bad("%s shape %v, want [%d]: the prompt's tokens", KeyTokenIDs, ids.Shape, tokens)
	}
	for _, t := range []struct {
		key string
		t   tensor
	}{{KeyHiddenStates, hs}, {KeyTokenIDs, ids}} {
		want := dtypeSize[t.t.DType]
		for _, d := range t.t.Shape {
			want *= d
		}
		if t.t.Offsets[0] < 0 || t.t.Offsets[1]-t.t.Offsets[0] != want {
			return hs, ids, bad("%s data_offsets %v hold %d bytes, its shape %d", t.key, t.t.Offsets, t.t.Offsets[1]-t.t.Offsets[0], want)
		}
	}
	first, second := hs, ids
	if ids.Offsets[0] < hs.Offsets[0] {
		first, second = ids, hs
	}
	if first.Offsets[0] != 0 || second.Offsets[0] != first.Offsets[1] {
		return hs, ids, bad("tensors' data at %v and %v: not end to end from the header", first.Offsets, second.Offsets)
	}
	return hs, ids, nil
}

// floatMask is, per float dtype, the bits of an element's exponent: all
// set is an infinity or a NaN.
var floatMask = map[string]uint64{"BF16": 0x7F80, "F16": 0x7C00, "F32": 0x7F800000}

// checkFinite reads size bytes of hidden states of dtype from r through
// buf and fails at the first value that is not finite.
func checkFinite(r io.Reader, buf []byte, size int64, dtype string) error {
	width := int(dtypeSize[dtype])
	var done int64
	for done < size {
		n := int(min(int64(len(buf)), size-done))
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return short(err, KeyHiddenStates)
		}
		if i := firstNonFinite(buf[:n], dtype); i >= 0 {
			return bad("%s value %d (byte %d of the tensor) is not finite", KeyHiddenStates, (done+int64(i))/int64(width), done+int64(i))
		}
		done += int64(n)
	}
	return nil
}

// firstNonFinite is the byte offset in b of the first element whose
// exponent is all ones, or -1. b holds whole elements (chunk is a
// multiple of every width). Eight bytes are looked at at once: for 16-bit
// floats, a lane of x&mask^mask is zero exactly when its exponent is all
// ones, which the borrow of a subtraction finds in every lane together.
func firstNonFinite(b []byte, dtype string) int {
	m := floatMask[dtype]
	var lanes, ones, high uint64
	switch dtype {
	case "F32":
		lanes, ones, high = m|m<<32, 0x0000000100000001, 0x8000000080000000
	default:
		lanes, ones, high = m|m<<16|m<<32|m<<48, 0x0001000100010001, 0x8000800080008000
	}
	i := 0
	for ; i+8 <= len(b); i += 8 {
		t := binary.LittleEndian.Uint64(b[i:])&lanes ^ lanes
		if (t-ones)&^t&high != 0 {
			return i + firstInWord(b[i:i+8], dtype)
		}
	}
	if i < len(b) {
		if j := firstInWord(b[i:], dtype); j >= 0 {
			return i + j
		}
	}
	return -1
}

// firstInWord is firstNonFinite for a few bytes, one element at a time.
func firstInWord(b []byte, dtype string) int {
	switch dtype {
	case "F32":
		for i := 0; i+4 <= len(b); i += 4 {
			if f := math.Float32frombits(binary.LittleEndian.Uint32(b[i:])); math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return i
			}
		}
	default:
		m := uint16(floatMask[dtype])
		for i := 0; i+2 <= len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])&m == m {
				return i
			}
		}
	}
	return -1
}

// checkIDs reads size bytes of token ids of dtype (I64 or I32) from r
// through buf and compares them with want.
func checkIDs(r io.Reader, buf []byte, size int64, dtype string, want []int64) error {
	width := int(dtypeSize[dtype])
	buf = buf[:len(buf)/8*8]
	k := 0
	for done := int64(0); done < size; {
		n := int(min(int64(len(buf)), size-done))
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return short(err, KeyTokenIDs)
		}
		for i := 0; i+width <= n; i, k = i+width, k+1 {
			var got int64
			if width == 8 {
				got = int64(binary.LittleEndian.Uint64(buf[i:]))
			} else {
				got = int64(int32(binary.LittleEndian.Uint32(buf[i:])))
			}
			if got != want[k] {
				return bad("%s[%d] is %d, the prompt's token is %d: the file is another request's", KeyTokenIDs, k, got, want[k])
			}
		}
		done += int64(n)
	}
	return nil
}

// Name is a sample's file name in a run's hidden_states directory, as
// speculators' trainer looks for it.
func Name(idx int) string { return "hs_" + strconv.Itoa(idx) + ".safetensors" }

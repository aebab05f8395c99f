package hiddenstates

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
)

// value is a deterministic, finite hidden state.
func value(tok int64, pos, layer, h int) float32 {
	return float32(tok%97)/97 - float32(pos%13)/13 + float32(layer) + float32(h%7)/7
}

func ids(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(1000 + 7*i)
	}
	return out
}

func encoded(t testing.TB, tokens []int64, layers, hidden int, dtype string, v Value) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := Encode(&b, tokens, layers, hidden, dtype, v)
	if err != nil || n != int64(b.Len()) {
		t.Fatalf("encode: %d bytes, %v", n, err)
	}
	return b.Bytes()
}

func TestVerifyAcceptsAGoodFileAndSumsIt(t *testing.T) {
	for _, dtype := range []string{"BF16", "F16", "F32"} {
		tokens := ids(37)
		file := encoded(t, tokens, 4, 96, dtype, value)
		s, err := Verify(bytes.NewReader(file), Want{TokenIDs: tokens, Layers: 4, Hidden: 96, DType: dtype})
		if err != nil {
			t.Fatalf("%s: %v", dtype, err)
		}
		sum := sha256.Sum256(file)
		if s.Bytes != int64(len(file)) || s.SHA256 != hex.EncodeToString(sum[:]) || s.Shape != [3]int{37, 4, 96} || s.DType != dtype {
			t.Errorf("%s: summary %+v, file of %d bytes", dtype, s, len(file))
		}
	}
}

// Every way a file can be wrong is refused, as an *Error saying how.
func TestVerifyRefusesWhatIsNotTheSample(t *testing.T) {
	tokens := ids(10)
	want := Want{TokenIDs: tokens, Layers: 3, Hidden: 8, DType: "BF16"}
	good := encoded(t, tokens, 3, 8, "BF16", value)
	headerEnd := 8 + int(binary.LittleEndian.Uint64(good))
	nan := func(tok int64, pos, layer, h int) float32 {
		if pos == 6 && layer == 2 && h == 5 {
			return float32(math.NaN())
		}
		return value(tok, pos, layer, h)
	}
	inf := func(tok int64, pos, layer, h int) float32 {
		if pos == 9 && layer == 2 && h == 7 {
			return float32(math.Inf(-1))
		}
		return value(tok, pos, layer, h)
	}
	other := append([]int64(nil), tokens...)
	other[4]++
	cases := []struct {
		name string
		file []byte
		want Want
		says string
	}{
		{"empty", nil, want, "cut short in the header's length"},
		{"cut in the header", good[:headerEnd-3], want, "cut short in the header"},
		{"cut in the token ids", good[:headerEnd+20], want, "cut short in token_ids"},
		{"cut in the hidden states", good[:len(good)-1], want, "cut short in hidden_states"},
		{"a byte too many", append(append([]byte(nil), good...), 0), want, "bytes after the end"},
		{"a NaN", encoded(t, tokens, 3, 8, "BF16", nan), want, "value 165 (byte 330 of the tensor) is not finite"},
		{"an infinity at the very end", encoded(t, tokens, 3, 8, "BF16", inf), want, "value 239 "},
		{"another request's tokens", encoded(t, other, 3, 8, "BF16", value), want, "token_ids[4] is 1029, the prompt's token is 1028"},
		{"fewer layers", encoded(t, tokens, 2, 8, "BF16", value), want, "hidden_states shape [10 2 8], want [10 3 8]"},
		{"another dtype", encoded(t, tokens, 3, 8, "F16", value), want, "dtype F16, want BF16"},
		{"fewer tokens", encoded(t, tokens[:9], 3, 8, "BF16", value), want, "shape [9 3 8], want [10 3 8]"},
		{"a huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), want, "header of 1099511627776 bytes"},
		{"not JSON", append(binary.LittleEndian.AppendUint64(nil, 4), "{{{{"...), want, "header is not JSON"},
		{"a third tensor", fileWith(t, `{"hidden_states":{"dtype":"BF16","shape":[10,3,8],"data_offsets":[0,480]},"token_ids":{"dtype":"I64","shape":[10],"data_offsets":[480,560]},"extra":{"dtype":"I64","shape":[0],"data_offsets":[560,560]}}`, 560), want, `tensors ["extra" "hidden_states" "token_ids"]`},
		{"a gap between the tensors", fileWith(t, `{"hidden_states":{"dtype":"BF16","shape":[10,3,8],"data_offsets":[0,480]},"token_ids":{"dtype":"I64","shape":[10],"data_offsets":[488,568]}}`, 568), want, "not end to end"},
		{"offsets that do not fit the shape", fileWith(t, `{"hidden_states":{"dtype":"BF16","shape":[10,3,8],"data_offsets":[0,400]},"token_ids":{"dtype":"I64","shape":[10],"data_offsets":[400,480]}}`, 480), want, "data_offsets [0 400] hold 400 bytes, its shape 480"},
	}
	for _, c := range cases {
		_, err := Verify(bytes.NewReader(c.file), c.want)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an *Error saying %q", c.name, err, c.says)
		}
	}
}

// fileWith is a file of header and size bytes of zero data (finite
// everywhere, token ids 0).
func fileWith(t *testing.T, header string, size int) []byte {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, size)...)
}

// A reader's own failure is returned as it is, not as a bad file.
func TestVerifyReturnsReadErrors(t *testing.T) {
	boom := errors.New("disk gone")
	tokens := ids(4)
	good := encoded(t, tokens, 1, 4, "BF16", value)
	_, err := Verify(io.MultiReader(bytes.NewReader(good[:40]), errReader{boom}), Want{TokenIDs: tokens, Layers: 1, Hidden: 4, DType: "BF16"})
	var e *Error
	if !errors.Is(err, boom) || errors.As(err, &e) {
		t.Errorf("got %v, want the reader's error", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// The lanes of firstNonFinite find the first bad element wherever it
// falls in a word, for every dtype, and nothing in a finite buffer.
func TestFirstNonFiniteEveryLane(t *testing.T) {
	for _, c := range []struct {
		dtype string
		width int
		bad   []byte
	}{
		{"BF16", 2, []byte{0x80, 0x7F}}, {"BF16", 2, []byte{0xC1, 0xFF}},
		{"F16", 2, []byte{0x00, 0x7C}}, {"F16", 2, []byte{0x01, 0xFE}},
		{"F32", 4, []byte{0x00, 0x00, 0x80, 0x7F}}, {"F32", 4, []byte{0x01, 0x00, 0xC0, 0xFF}},
	} {
		buf := make([]byte, 64)
		for i := 0; i < len(buf); i += c.width { // large finite values, exponent one short of all ones
			switch c.dtype {
			case "BF16":
				binary.LittleEndian.PutUint16(buf[i:], 0x7F7F)
			case "F16":
				binary.LittleEndian.PutUint16(buf[i:], 0xFBFF)
			default:
				binary.LittleEndian.PutUint32(buf[i:], 0xFF7FFFFF)
			}
		}
		if i := firstNonFinite(buf, c.dtype); i != -1 {
			t.Fatalf("%s: a finite buffer has a bad value at %d", c.dtype, i)
		}
		for at := 0; at < len(buf); at += c.width {
			b := append([]byte(nil), buf...)
			copy(b[at:], c.bad)
			if i := firstNonFinite(b, c.dtype); i != at {
				t.Errorf("%s % x at %d: found at %d", c.dtype, c.bad, at, i)
			}
		}
	}
}

// Verifying holds one chunk whatever the file's size: a file 64 times
// larger allocates about as much.
func TestVerifyMemoryIsFlat(t *testing.T) {
	small, large := allocated(t, 1<<20), allocated(t, 64<<20)
	t.Logf("allocated verifying 1 MiB: %d bytes; 64 MiB: %d bytes", small, large)
	if large > small+256<<10 {
		t.Errorf("verifying 64 MiB allocated %d bytes, 1 MiB %d: memory grows with the file", large, small)
	}
}

// allocated is the bytes Verify allocates for a BF16 file of about size
// bytes, streamed to it as it is encoded.
func allocated(t *testing.T, size int) uint64 {
	t.Helper()
	const layers, hidden = 4, 1024
	tokens := ids(size / (layers * hidden * 2))
	pr, pw := io.Pipe()
	go func() {
		_, err := Encode(pw, tokens, layers, hidden, "BF16", func(int64, int, int, int) float32 { return 0.5 })
		pw.CloseWithError(err)
	}()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Verify(pr, Want{TokenIDs: tokens, Layers: layers, Hidden: hidden, DType: "BF16"}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestBF16Rounds(t *testing.T) {
	for f, want := range map[float32]uint16{1: 0x3F80, -2: 0xC000, 1.00390625: 0x3F80, 1.01171875: 0x3F82, float32(math.Inf(1)): 0x7F80} {
		if got := BF16(f); got != want {
			t.Errorf("BF16(%v) = %#04x, want %#04x", f, got, want)
		}
	}
	if got := BF16(float32(math.NaN())); got&0x7F80 != 0x7F80 || got&0x7F == 0 {
		t.Errorf("BF16(NaN) = %#04x, not a NaN", got)
	}
}

package hiddenstates

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// Value gives the hidden state of a sample's token tok, at position pos,
// in layer (0 to layers-1), dimension h.
type Value func(tok int64, pos, layer, h int) float32

// Encode writes a sample's extraction file to w as the safetensors
// library lays out vLLM's connector's (tensors of the widest dtype
// first: the token ids, then the hidden states), streaming the values
// through one buffer. It returns the bytes written.
func Encode(w io.Writer, ids []int64, layers, hidden int, dtype string, v Value) (int64, error) {
	width, ok := dtypeSize[dtype]
	if _, float := floatMask[dtype]; !ok || !float {
		return 0, fmt.Errorf("encode hidden states: dtype %q: use BF16, F16 or F32", dtype)
	}
	hsBytes := int64(len(ids)) * int64(layers) * int64(hidden) * width
	idsBytes := 8 * int64(len(ids))
	header, err := json.Marshal(map[string]tensor{
		KeyTokenIDs:     {DType: "I64", Shape: []int64{int64(len(ids))}, Offsets: [2]int64{0, idsBytes}},
		KeyHiddenStates: {DType: dtype, Shape: []int64{int64(len(ids)), int64(layers), int64(hidden)}, Offsets: [2]int64{idsBytes, idsBytes + hsBytes}},
	})
	if err != nil {
		return 0, err
	}
	for len(header)%8 != 0 { // the data starts 8-byte aligned, as safetensors pads it
		header = append(header, ' ')
	}
	bw := &countWriter{w: w}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(header)))
	bw.write(lenBuf[:])
	bw.write(header)
	buf := make([]byte, 0, chunk)
	flush := func() {
		bw.write(buf)
		buf = buf[:0]
	}
	for _, id := range ids {
		if len(buf)+8 > cap(buf) {
			flush()
		}
		buf = binary.LittleEndian.AppendUint64(buf, uint64(id))
	}
	for pos, tok := range ids {
		for layer := range layers {
			for h := range hidden {
				if len(buf)+int(width) > cap(buf) {
					flush()
				}
				f := v(tok, pos, layer, h)
				switch dtype {
				case "BF16":
					buf = binary.LittleEndian.AppendUint16(buf, BF16(f))
				case "F16":
					buf = binary.LittleEndian.AppendUint16(buf, f16(f))
				default:
					buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(f))
				}
			}
		}
	}
	flush()
	return bw.n, bw.err
}

// countWriter counts what it writes and keeps the first error.
type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) write(b []byte) {
	if c.err != nil || len(b) == 0 {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

// BF16 is f as bfloat16 bits, rounded to nearest even; a NaN stays one.
func BF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7FFF + (b>>16)&1) >> 16)
}

// f16 is f as IEEE half-precision bits, truncated; out of range it is an
// infinity, a NaN stays one.
func f16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xFF) - 127 + 15
	mant := b & 0x7FFFFF
	switch {
	case f != f:
		return sign | 0x7E00
	case exp >= 31:
		return sign | 0x7C00
	case exp <= 0:
		return sign // flushed to zero
	}
	return sign | uint16(exp)<<10 | uint16(mant>>13)
}

// Synthetic is the hidden state aerie's simulator writes for token tok
// at position pos, in the layer of id layerID, dimension h: finite, of
// a size bf16 keeps to the last bit, and computed from its coordinates
// alone, so that a test recomputes any value of any file.
func Synthetic(tok int64, pos, layerID, h int) float32 {
	x := uint64(tok)*0x9E3779B97F4A7C15 ^ uint64(pos)*0xC2B2AE3D27D4EB4F ^ uint64(layerID)*0x165667B19E3779F9 ^ uint64(h)*0x27D4EB2F165667C5
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	return float32(int(x%2001)-1000) / 256
}

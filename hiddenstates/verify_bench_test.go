package hiddenstates

import (
	"bytes"
	"testing"
)

// BenchmarkVerify is the speed of verification alone, from memory: a
// BF16 file of 64 MiB (4 layers of 7,168, as a Kimi-class target's, and
// 1,170 tokens). b.SetBytes makes the figure bytes of file a second.
func BenchmarkVerify(b *testing.B) {
	const layers, hidden = 4, 7168
	tokens := ids(64 << 20 / (layers * hidden * 2))
	file := encoded(b, tokens, layers, hidden, "BF16", value)
	want := Want{TokenIDs: tokens, Layers: layers, Hidden: hidden, DType: "BF16"}
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(bytes.NewReader(file), want); err != nil {
			b.Fatal(err)
		}
	}
}

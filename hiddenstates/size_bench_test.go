//go:build linux

package hiddenstates

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"
	"time"
)

// BenchmarkPublishBySize is a worker's whole path for one sample's file
// (wait for its lock, verify it as a stream, publish it under its final
// name) for files of 1 MB to 1 GB of a Kimi-class target's (4 layers of
// 7,168, BF16; 56 KiB a token), freshly written as a server would leave
// it. It reports the bytes of file a second and the process's peak RSS
// during the publish (VmHWM, reset before each size), which must not
// grow with the file.
func BenchmarkPublishBySize(b *testing.B) {
	const layers, hidden = 4, 7168
	perToken := int64(layers*hidden*2 + 8)
	for _, size := range []int64{1 << 20, 16 << 20, 256 << 20, 1 << 30} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			dir := b.TempDir()
			tokens := ids(int(size / perToken))
			want := Want{TokenIDs: tokens, Layers: layers, Hidden: hidden, DType: "BF16"}
			src := filepath.Join(dir, "req.safetensors")
			var n int64
			var peak int64
			i := 0
			for b.Loop() {
				b.StopTimer()
				f, err := os.Create(src)
				if err != nil {
					b.Fatal(err)
				}
				w := bufio.NewWriterSize(f, 1<<20)
				if n, err = Encode(w, tokens, layers, hidden, "BF16", func(tok int64, pos, layer, h int) float32 { return float32(h&7) - 3.5 }); err != nil {
					b.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
				f.Close()
				resetPeakRSS(b)
				b.StartTimer()
				release, err := WaitWritten(context.Background(), src, time.Millisecond)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Publish(src, filepath.Join(dir, Name(i)), want); err != nil {
					b.Fatal(err)
				}
				release()
				b.StopTimer()
				peak = max(peak, peakRSS(b))
				os.Remove(filepath.Join(dir, Name(i)))
				i++
				b.StartTimer()
			}
			b.SetBytes(n)
			b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
		})
	}
}

// resetPeakRSS resets the process's VmHWM to its current RSS (Linux's
// clear_refs 5).
func resetPeakRSS(b *testing.B) {
	// What earlier benchmarks left on the heap is given back first.
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skipf("cannot reset the peak RSS: %v", err)
	}
}

// peakRSS is the process's VmHWM in bytes.
func peakRSS(b *testing.B) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}

package export_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/datasettest"
	"github.com/aerie-dev/aerie/export"
)

// BenchmarkExport prints each format's export speed in MB/s of
// completions.jsonl read. AERIE_BENCH_EXPORT_DIR names a run's output
// directory to read (make bench passes the one of `make run TURNS=all`);
// without it, 5,000 generated answers of about 10 KB.
func BenchmarkExport(b *testing.B) {
	dir := os.Getenv("AERIE_BENCH_EXPORT_DIR")
	if dir == "" {
		dir = b.TempDir()
		if _, err := datasettest.WriteLongCompletions(filepath.Join(dir, dataset.CompletionsFile), 5000); err != nil {
			b.Fatal(err)
		}
	}
	info, err := os.Stat(filepath.Join(dir, dataset.CompletionsFile))
	if err != nil {
		b.Fatal(err)
	}
	for _, format := range []string{export.FormatSpecForge, export.FormatShareGPT, export.FormatParquet, export.FormatOpenAIBatch} {
		b.Run(format, func(b *testing.B) {
			b.SetBytes(info.Size())
			for b.Loop() {
				opts := export.Options{Format: format, Run: "bench", AllowSimulated: true}
				if format == export.FormatParquet {
					out := filepath.Join(b.TempDir(), "ds")
					if _, err := export.WriteParquet(context.Background(), export.Files(dir), out, opts); err != nil {
						b.Fatal(err)
					}
					os.RemoveAll(out)
					continue
				}
				if _, err := export.Write(context.Background(), export.Files(dir), io.Discard, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package report

import (
	"path/filepath"
	"testing"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/datasettest"
)

// BenchmarkReadCompletions reads a completions.jsonl of 10,000 answers
// of the length a reasoning model writes (about 6 KB of reasoning and 3
// KB of answer a line), as the end of a run does to build its report.
func BenchmarkReadCompletions(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	size, err := datasettest.WriteLongCompletions(filepath.Join(dir, dataset.CompletionsFile), n)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		var skipped Skipped
		c, err := readCompletions(dir, &skipped)
		if err != nil || c.count != n || skipped.Lines != 0 {
			b.Fatalf("read %d of %d, skipped %d: %v", c.count, n, skipped.Lines, err)
		}
	}
}

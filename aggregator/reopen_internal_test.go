package aggregator

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/aerie-dev/aerie/dataset/datasettest"
	"github.com/aerie-dev/aerie/schema"
)

// BenchmarkReopen opens a completions.jsonl of 10,000 answers of the
// length a reasoning model writes (about 10 KB a line) as a restarted
// aggregator does: every line read, checked and indexed before the first
// new answer is written.
func BenchmarkReopen(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	size, err := datasettest.WriteLongCompletions(filepath.Join(dir, CompletionsFile), n)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		a := &Aggregator{cfg: Config{Run: "r"}, dir: dir, log: slog.New(slog.DiscardHandler)}
		if err := a.open(&schema.Manifest{Run: "r", Total: n}); err != nil {
			b.Fatal(err)
		}
		if seen, err := a.completions.has(schema.Unit{ID: fmt.Sprintf("p%05d", n-1)}.Key()); err != nil || !seen {
			b.Fatalf("the last line is not indexed (%v)", err)
		}
		a.completions.Close()
		a.failed.Close()
		a.events.Close()
	}
}

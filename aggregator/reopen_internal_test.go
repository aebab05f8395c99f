package aggregator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// BenchmarkReopen opens a completions.jsonl of 10,000 answers of the
// length a reasoning model writes (about 10 KB a line) as a restarted
// aggregator does: every line read, checked and indexed before the first
// new answer is written.
func BenchmarkReopen(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	size := writeLongCompletions(b, filepath.Join(dir, CompletionsFile), n)
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

// writeLongCompletions writes n completions.jsonl lines of about 10 KB
// each and returns the file's size.
func writeLongCompletions(b *testing.B, path string, n int) int64 {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range n {
		r := schema.Result{
			ID: fmt.Sprintf("p%05d", i), Messages: []schema.Message{{Role: "user", Content: strings.Repeat("question ", 60)}},
			Model: "m", Reasoning: strings.Repeat("Let me think about it. ", 270), Content: strings.Repeat("The answer is this. ", 150),
			FinishReason: "stop", PromptTokens: 120, CompletionTokens: 2200, Worker: "w1", Attempts: 1,
			TTFTMillis: 300, LatencyMs: 40000, FinishedAt: time.Now(),
		}
		if err := enc.Encode(dataset.NewCompletionLine(&r)); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	info, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	return info.Size()
}

package report

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// BenchmarkReadCompletions reads a completions.jsonl of 10,000 answers
// of the length a reasoning model writes (about 6 KB of reasoning and 3
// KB of answer a line), as the end of a run does to build its report.
func BenchmarkReadCompletions(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, dataset.CompletionsFile))
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	var size int64
	for i := range n {
		r := schema.Result{
			ID: "p" + strings.Repeat("0", 5) + string(rune('a'+i%26)), Messages: []schema.Message{{Role: "user", Content: strings.Repeat("question ", 60)}},
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
	if info, err := f.Stat(); err == nil {
		size = info.Size()
	}
	f.Close()
	b.SetBytes(size)
	for b.Loop() {
		var skipped Skipped
		c, err := readCompletions(dir, &skipped)
		if err != nil || c.count != n || skipped.Lines != 0 {
			b.Fatalf("read %d of %d, skipped %d: %v", c.count, n, skipped.Lines, err)
		}
	}
}

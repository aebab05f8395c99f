// Package datasettest writes aerie output files for tests and
// benchmarks of what reads them back.
package datasettest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// WriteLongCompletions writes to path a completions.jsonl of n answers
// (ids p00000, p00001, ...) of the length a reasoning model writes: a
// 540-byte prompt, about 6 KB of reasoning and 3 KB of answer, about 10
// KB a line. It returns the file's size.
func WriteLongCompletions(path string, n int) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	finished := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		r := schema.Result{
			ID: fmt.Sprintf("p%05d", i), Messages: []schema.Message{{Role: "user", Content: strings.Repeat("question ", 60)}},
			Model: "m", Reasoning: strings.Repeat("Let me think about it. ", 270), Content: strings.Repeat("The answer is this. ", 150),
			FinishReason: "stop", PromptTokens: 120, CompletionTokens: 2200, Worker: "w1", Attempts: 1,
			TTFTMillis: 300, LatencyMs: 40000, FinishedAt: finished.Add(time.Duration(i) * time.Millisecond),
		}
		if err := enc.Encode(dataset.NewCompletionLine(&r)); err != nil {
			return 0, err
		}
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return info.Size(), f.Close()
}

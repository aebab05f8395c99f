package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/simulator"
)

// An OpenAI Batch input file, as vllm run-batch reads it, runs to
// completion: each custom_id is an output line's id.
func TestRunOpenAIBatchFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "batch.jsonl")
	var lines []string
	for i := range 12 {
		lines = append(lines, fmt.Sprintf(`{"custom_id": "request-%d", "method": "POST", "url": "/v1/chat/completions", "body": {"model": %q, "messages": [{"role": "system", "content": "You are a helpful assistant."},{"role": "user", "content": "Hello world %d!"}],"max_completion_tokens": 1000, "temperature": 0.5}}`,
			i, simulator.DefaultModel, i))
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := pipeline.Run(context.Background(), config(t, "batch", path))
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done || sum.Completed != 12 {
		t.Fatalf("summary %+v, want 12 completed", sum)
	}
	var ids []string
	for _, l := range readOutput(t, sum.Completions) {
		ids = append(ids, l.ID)
	}
	sort.Strings(ids)
	if len(ids) != 12 || ids[0] != "request-0" || ids[11] != "request-9" {
		t.Errorf("output ids %v", ids)
	}
}

// A batch line naming another model than the run's stops the run before
// anything is queued, saying where.
func TestRunOpenAIBatchWrongModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "batch.jsonl")
	line := `{"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-3.5-turbo-0125", "messages": [{"role": "user", "content": "Hello world!"}]}}`
	if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := pipeline.Run(context.Background(), config(t, "batch", path))
	if err == nil || !strings.Contains(err.Error(), path+`:1: body.model is "gpt-3.5-turbo-0125" but the run's model is "`+simulator.DefaultModel+`"`) {
		t.Fatalf("error %v", err)
	}
}

// A Parquet file written by another library runs to completion.
func TestRunParquetFile(t *testing.T) {
	data, err := os.ReadFile("../dataset/testdata/messages.parquet")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "prompts.parquet")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := pipeline.Run(context.Background(), config(t, "parquet", path))
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done || sum.Completed != 3 {
		t.Fatalf("summary %+v, want 3 completed", sum)
	}
}

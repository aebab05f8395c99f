package export_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/export"
	"github.com/aerie-dev/aerie/schema"
)

var update = flag.Bool("update", false, "rewrite the expected export files in testdata")

// qwenTemplate is a chat template in the style of Qwen3's: ChatML turns,
// and the last answer's reasoning_content rendered between think tags
// before its content.
const qwenTemplate = `{%- for message in messages -%}
{%- if message.role == 'assistant' and loop.last and message.reasoning_content -%}
{{ '<|im_start|>assistant\n<think>\n' + message.reasoning_content + '\n</think>\n\n' + message.content + '<|im_end|>\n' }}
{%- else -%}
{{ '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endif -%}
{%- endfor -%}`

// kimiTemplate is a chat template in the style of Kimi-K2's: its own
// role markers, and assistant turns rendered from content alone, so the
// reasoning is dropped.
const kimiTemplate = `{%- for message in messages -%}
{{ '<|im_' + message.role + '|>' + message.role + '<|im_middle|>' + message.content + '<|im_end|>' }}
{%- endfor -%}`

func exported(t *testing.T, src export.Source, opts export.Options) (string, export.Summary, error) {
	t.Helper()
	var b bytes.Buffer
	if opts.Run == "" {
		opts.Run = "demo"
	}
	sum, err := export.Write(context.Background(), src, &b, opts)
	return b.String(), sum, err
}

// Each format, exported from a run holding the OpenAI Batch guide's
// request-1 and request-2 (request-2 with three samples, one failed), a
// conversation regenerated turn by turn, a truncated answer and a prompt
// refused for its length, equals its expected file: the shapes of
// SpecForge's, ShareGPT's, OpenAI Batch's and speculators' own examples.
func TestExportFormats(t *testing.T) {
	tmpl, err := export.ParseChatTemplate([]byte(qwenTemplate))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		file    string
		opts    export.Options
		written int
		leftOut map[string]int
	}{
		{"specforge.jsonl", export.Options{Format: export.FormatSpecForge}, 4, map[string]int{export.DropTruncated: 1}},
		{"sharegpt.jsonl", export.Options{Format: export.FormatShareGPT}, 4, map[string]int{export.DropTruncated: 1}},
		{"sharegpt-tags.jsonl", export.Options{Format: export.FormatShareGPT, ThinkOpen: "<reasoning>", ThinkClose: "</reasoning>"}, 4, map[string]int{export.DropTruncated: 1}},
		{"openai-batch.jsonl", export.Options{Format: export.FormatOpenAIBatch}, 7, map[string]int{}},
		{"text.jsonl", export.Options{Format: export.FormatText, ChatTemplate: tmpl}, 4, map[string]int{export.DropTruncated: 1}},
		{"speculators.jsonl", export.Options{Format: export.FormatSpeculators}, 3, map[string]int{export.DropTruncated: 1, export.DroppedNoTokenIDs: 2}},
	}
	for _, c := range cases {
		got, sum, err := exported(t, export.Files("testdata/run"), c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		want := filepath.Join("testdata", "export", c.file)
		if *update {
			if err := os.WriteFile(want, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(want)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(b) {
			t.Errorf("%s: got\n%s\nwant\n%s", c.file, got, b)
		}
		if sum.RowsWritten != c.written || len(sum.Dropped) != len(c.leftOut) {
			t.Errorf("%s: summary %+v, want %d written, left out %v", c.file, sum, c.written, c.leftOut)
		}
		for r, n := range c.leftOut {
			if sum.Dropped[r] != n {
				t.Errorf("%s: %d left out as %s, want %d", c.file, sum.Dropped[r], r, n)
			}
		}
		for i, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
			if !json.Valid([]byte(line)) {
				t.Errorf("%s:%d is not JSON: %s", c.file, i+1, line)
			}
		}
	}
}

// --drop none keeps the answer cut at max_tokens, and the summary says
// none was dropped; by default the trainer formats drop it and say so.
func TestDropNone(t *testing.T) {
	got, sum, err := exported(t, export.Files("testdata/run"), export.Options{Format: export.FormatSpecForge, Drop: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.RowsWritten != 5 || len(sum.Dropped) != 0 || !strings.Contains(got, `"id":"long-4"`) {
		t.Errorf("summary %+v, output:\n%s", sum, got)
	}
	if !strings.Contains(sum.String(), "5 rows written") || !strings.Contains(sum.String(), "none dropped") {
		t.Errorf("summary reads %q", sum)
	}
	_, sum, _ = exported(t, export.Files("testdata/run"), export.Options{Format: export.FormatSpecForge})
	if s := sum.String(); !strings.Contains(s, "1 dropped: 1 truncated") || !strings.Contains(s, "--drop truncated,empty") {
		t.Errorf("summary reads %q", s)
	}
}

// Every sample of a prompt has its own id: the prompt's for sample 0,
// "<id>#<k>" for sample k, in every format.
func TestSampleIDs(t *testing.T) {
	for _, f := range []string{export.FormatSpecForge, export.FormatShareGPT, export.FormatSpeculators} {
		got, _, err := exported(t, export.Files("testdata/run"), export.Options{Format: f})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
			var l struct{ ID string }
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatal(err)
			}
			ids[l.ID]++
		}
		if ids["request-2"] != 1 || ids["request-2#1"] != 1 {
			t.Errorf("%s: ids %v", f, ids)
		}
	}
	got, _, _ := exported(t, export.Files("testdata/run"), export.Options{Format: export.FormatOpenAIBatch})
	if !strings.Contains(got, `"custom_id":"request-2#2","response":null`) {
		t.Errorf("the failed third sample is not request-2#2:\n%s", got)
	}
}

// A run without token ids cannot be exported for speculators; the error
// says how to get them, and no file is left behind.
func TestSpeculatorsWithoutTokenIDs(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("testdata/run/completions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(string(src)), "\n") {
		var l dataset.CompletionLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		l.PromptTokenIDs, l.TokenIDs = nil, nil
		b, _ := json.Marshal(l)
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(filepath.Join(dir, dataset.CompletionsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.jsonl")
	err = dataset.WriteFileAtomic(out, func(w io.Writer) error {
		_, err := export.Write(context.Background(), export.Files(dir), w, export.Options{Format: export.FormatSpeculators, Run: "demo"})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "--return-token-ids") {
		t.Fatalf("export without token ids: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed export left %s: %v", out, err)
	}
}

// A run that asked for token ids and has none names its backend as the
// cause in the speculators export's error; one that did not ask names
// the flag.
func TestSpeculatorsWithoutTokenIDsNamesTheCause(t *testing.T) {
	dir := t.TempDir()
	line := `{"id":"a","sample":0,"messages":[{"role":"user","content":"q"}],"content":"x","finish_reason":"stop","turns":1,"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, dataset.CompletionsFile), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, asked := range []bool{false, true} {
		_, _, err := exported(t, export.Files(dir), export.Options{Format: export.FormatSpeculators, Manifest: &schema.Manifest{ReturnTokenIDs: asked}})
		want := "produce the run with --return-token-ids"
		if asked {
			want = "its backend did not return them (vLLM returns them from 0.10.2 on)"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("asked %v: %v", asked, err)
		}
	}
}

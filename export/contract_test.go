package export_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/export"
)

// The rules below are the consumers' own, each from the file and
// function named beside it, so that an export is checked against what
// its reader requires rather than against a file aerie wrote.

// specForgeValidate is SpecForge's scripts/validate_regenerated_data.py
// validate_row, with scripts/conversation_validation.py
// validate_conversation: a non-empty string id, status "success", a
// non-empty conversation of non-empty string contents whose roles are
// an optional leading system message then user and assistant in turn,
// reasoning_content a string or null, non-empty on every assistant
// message with --expect-reasoning, and an assistant message last.
func specForgeValidate(line string, expectReasoning bool) error {
	var row map[string]any
	if err := json.Unmarshal([]byte(line), &row); err != nil {
		return err
	}
	if id, ok := row["id"].(string); !ok || strings.TrimSpace(id) == "" {
		return errors.New("id must be a non-empty string")
	}
	if row["status"] != "success" {
		return errors.New("status must be 'success'")
	}
	msgs, ok := row["conversations"].([]any)
	if !ok || len(msgs) == 0 {
		return errors.New("conversations must be a non-empty list")
	}
	expected, sawUser := "user", false
	assistants := 0
	for i, mv := range msgs {
		m, ok := mv.(map[string]any)
		if !ok {
			return fmt.Errorf("message %d must be an object", i)
		}
		content, ok := m["content"].(string)
		if !ok || strings.TrimSpace(content) == "" {
			return fmt.Errorf("message %d content must be a non-empty string", i)
		}
		role := m["role"]
		if role == "system" && !sawUser {
			continue
		}
		if role != "user" && role != "assistant" {
			return fmt.Errorf("message %d has unsupported role %v", i, role)
		}
		if role != expected {
			return fmt.Errorf("message %d expected role %s, got %v", i, expected, role)
		}
		sawUser = true
		if role == "user" {
			expected = "assistant"
			continue
		}
		expected = "user"
		assistants++
		r, present := m["reasoning_content"]
		if present && r != nil {
			if _, ok := r.(string); !ok {
				return fmt.Errorf("assistant message %d reasoning_content must be a string or null", i)
			}
		}
		if s, _ := r.(string); expectReasoning && strings.TrimSpace(s) == "" {
			return fmt.Errorf("assistant message %d has empty reasoning_content", i)
		}
	}
	if assistants == 0 {
		return errors.New("conversation has no assistant message")
	}
	if last, _ := msgs[len(msgs)-1].(map[string]any); last["role"] != "assistant" {
		return errors.New("conversation must end with an assistant message")
	}
	return nil
}

// specForgeRowFromDocs is a row of SpecForge's own: the shape
// scripts/regenerate_train_data.py call_sglang returns with --reasoning
// save (the input row's fields, the regenerated conversations with
// reasoning_content on each answer, status success).
const specForgeRowFromDocs = `{"id": "conv-abc", "conversations": [{"role": "user", "content": "What is the capital of France?"}, {"role": "assistant", "content": "The capital of France is Paris.", "reasoning_content": "France's capital: Paris."}], "status": "success"}`

// The Go validator agrees with SpecForge's on its own row, and on what
// it rejects: a row without status, and an assistant turn without
// reasoning under --expect-reasoning.
func TestSpecForgeValidatorModel(t *testing.T) {
	for _, expect := range []bool{false, true} {
		if err := specForgeValidate(specForgeRowFromDocs, expect); err != nil {
			t.Errorf("SpecForge's own row, expect-reasoning %v: %v", expect, err)
		}
	}
	noStatus := strings.Replace(specForgeRowFromDocs, `, "status": "success"`, "", 1)
	if err := specForgeValidate(noStatus, false); err == nil {
		t.Error("a row without status passed")
	}
	noReasoning := `{"id": "x", "conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "status": "success"}`
	if specForgeValidate(noReasoning, false) != nil || specForgeValidate(noReasoning, true) == nil {
		t.Error("reasoning_content absent: want accepted without --expect-reasoning only")
	}
}

func exportLines(t *testing.T, dir string, opts export.Options) ([]string, export.Summary) {
	t.Helper()
	got, sum, err := exported(t, export.Files(dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	got = strings.TrimSuffix(got, "\n")
	if got == "" {
		return nil, sum
	}
	return strings.Split(got, "\n"), sum
}

// Every specforge row of a run regenerated turn by turn passes SpecForge's
// validator with and without --expect-reasoning; a row whose earlier
// answer came from the prompts file carries no reasoning_content on it,
// passes without --expect-reasoning, fails with it as SpecForge's does,
// and is left out by --drop non-target-turns.
func TestSpecForgeRowsPassItsValidator(t *testing.T) {
	lines, sum := exportLines(t, "testdata/turns", export.Options{Format: export.FormatSpecForge,
		Drop: []string{export.DropTruncated, export.DropEmpty, export.DropReasoningOnly}})
	if len(lines) != 4 || sum.NonTargetRows != 2 || sum.SystemRows != 2 {
		t.Fatalf("%d rows, %d with non-target turns, %d with system; want 4, 2 (q-7 and its copy), 2\n%s", len(lines), sum.NonTargetRows, sum.SystemRows, strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if err := specForgeValidate(l, false); err != nil {
			t.Errorf("rejected: %v\n%s", err, l)
		}
		expectErr := specForgeValidate(l, true)
		nonTarget := strings.Contains(l, `"id":"q-7`)
		if nonTarget != (expectErr != nil) {
			t.Errorf("--expect-reasoning: %v\n%s", expectErr, l)
		}
		if nonTarget && strings.Contains(l, `{"role":"assistant","content":"7","reasoning_content"`) {
			t.Errorf("reasoning_content on a turn the target did not write:\n%s", l)
		}
		if !strings.HasPrefix(l, `{"id":`) || !strings.HasSuffix(l, `"status":"success"}`) {
			t.Errorf("not in the order regenerate_train_data.py writes: %s", l)
		}
	}
	if !strings.HasPrefix(lines[0], `{"id":"conv-abc","conversations":[{"role":"system","content":"You are a helpful assistant."}`) {
		t.Errorf("the system message is not kept as role system: %s", lines[0])
	}
	var trainOnlyLast bool
	for _, s := range sum.Settings {
		trainOnlyLast = trainOnlyLast || (s.Name == "data.train_only_last_turn" && s.Value == "true")
	}
	if !trainOnlyLast {
		t.Errorf("rows with non-target turns and no train_only_last_turn setting: %+v", sum.Settings)
	}

	lines, sum = exportLines(t, "testdata/turns", export.Options{Format: export.FormatSpecForge,
		Drop: []string{export.DropTruncated, export.DropEmpty, export.DropReasoningOnly, export.DropNoReasoning, export.DropNonTargetTurns}})
	for _, l := range lines {
		if err := specForgeValidate(l, true); err != nil {
			t.Errorf("with every filter, --expect-reasoning rejected: %v\n%s", err, l)
		}
	}
	if len(lines) != 2 || sum.Dropped[export.DropNonTargetTurns] != 2 || sum.NonTargetRows != 0 {
		t.Errorf("%d rows, dropped %v; want the two samples of conv-abc, 2 non-target", len(lines), sum.Dropped)
	}
	var cmd string
	for _, c := range sum.Commands {
		cmd += c.Command + "\n"
	}
	if !strings.Contains(cmd, "validate_regenerated_data.py --data-path FILE --expect-reasoning") ||
		!strings.Contains(cmd, "data.chat_template=kimi-k2-thinking") {
		t.Errorf("commands:\n%s", cmd)
	}
}

// speculatorsRow is what speculators' _passthrough_pretokenized
// (src/speculators/data_generation/preprocessing.py) reads of a row.
type speculatorsRow struct {
	ID        string `json:"id"`
	PrimaryID string `json:"primary_id"`
	InputIDs  []int  `json:"input_ids"`
	LossMask  []int  `json:"loss_mask"`
	Metadata  struct {
		Turn         int    `json:"turn"`
		Sample       int    `json:"sample"`
		FinishReason string `json:"finish_reason"`
		Usage        struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	} `json:"metadata"`
}

// checkSpeculatorsRow checks a row as speculators' regenerator builds it
// (scripts/response_regeneration/script.py build_boundary_sample: the
// prompt's ids with loss 0, then the answer's with loss 1) and as its
// preprocessing accepts it (_passthrough_pretokenized: input_ids and
// loss_mask of one length, the mask of zeros and ones).
func checkSpeculatorsRow(t *testing.T, line string) speculatorsRow {
	t.Helper()
	var r speculatorsRow
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if len(r.InputIDs) != len(r.LossMask) || len(r.InputIDs) == 0 {
		t.Fatalf("%s: %d input_ids, %d loss_mask", r.ID, len(r.InputIDs), len(r.LossMask))
	}
	ones, boundary := 0, -1
	for i, m := range r.LossMask {
		switch m {
		case 0:
			if boundary >= 0 {
				t.Errorf("%s: loss 0 at %d after the answer began at %d", r.ID, i, boundary)
			}
		case 1:
			if boundary < 0 {
				boundary = i
			}
			ones++
		default:
			t.Fatalf("%s: mask value %d", r.ID, m)
		}
	}
	if ones != r.Metadata.Usage.CompletionTokens {
		t.Errorf("%s: loss on %d tokens, the turn generated %d", r.ID, ones, r.Metadata.Usage.CompletionTokens)
	}
	if boundary != r.Metadata.Usage.PromptTokens {
		t.Errorf("%s: the answer begins at %d, the prompt had %d tokens", r.ID, boundary, r.Metadata.Usage.PromptTokens)
	}
	return r
}

// A run regenerated turn by turn gives one speculators row per generated
// turn and sample, each mask summing to its turn's completion_tokens,
// with the ids <id>, <id>:t<k> and <id>#<s>.
func TestSpeculatorsRowPerTurn(t *testing.T) {
	lines, sum := exportLines(t, "testdata/turns", export.Options{Format: export.FormatSpeculators, Drop: []string{}})
	var ids []string
	for _, l := range lines {
		r := checkSpeculatorsRow(t, l)
		ids = append(ids, fmt.Sprintf("%s/%s/t%d/s%d", r.ID, r.PrimaryID, r.Metadata.Turn, r.Metadata.Sample))
	}
	want := "conv-abc:t1/conv-abc/t1/s0 conv-abc/conv-abc/t2/s0 conv-abc#1:t1/conv-abc#1/t1/s1 conv-abc#1/conv-abc#1/t2/s1 q-7/q-7/t1/s0 q-8/q-8/t1/s0 q-9/q-9/t1/s0 q-7-copy/q-7-copy/t1/s0"
	if got := strings.Join(ids, " "); got != want {
		t.Errorf("rows\n%s\nwant\n%s", got, want)
	}
	if sum.LinesRead != 6 || sum.RowsWritten != 8 || sum.TokenCountMismatch != 0 {
		t.Errorf("%d lines, %d rows, %d mismatches", sum.LinesRead, sum.RowsWritten, sum.TokenCountMismatch)
	}
	if !strings.Contains(lines[1], `"input_ids":[1,2,3,4,5,10,11,12,6,20,21]`) {
		t.Errorf("the second turn's row is not its prompt's ids then its answer's: %s", lines[1])
	}
}

// --system merge leaves no system role: its text goes in front of the
// first human turn, as the original EAGLE-3 script's roles (human, gpt)
// require; keep warns, naming the scripts that cannot read it.
func TestShareGPTSystem(t *testing.T) {
	lines, sum := exportLines(t, "testdata/turns", export.Options{Format: export.FormatShareGPT, System: export.SystemMerge})
	if sum.SystemRows != 0 || strings.Contains(strings.Join(sum.Warnings, " "), "system") {
		t.Errorf("--system merge: %d rows said to hold a system message, warnings %q", sum.SystemRows, sum.Warnings)
	}
	var row struct {
		Conversations []struct{ From, Value string } `json:"conversations"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &row); err != nil {
		t.Fatal(err)
	}
	for _, m := range row.Conversations {
		if m.From != "human" && m.From != "gpt" {
			t.Errorf("role %q under --system merge: %s", m.From, lines[0])
		}
	}
	if v := row.Conversations[0].Value; v != "You are a helpful assistant.\n\nWhat is the capital of France?" {
		t.Errorf("first human turn %q", v)
	}
	if v := row.Conversations[1].Value; v != "<think>\nFrance's capital: Paris.\n</think>\n\nThe capital of France is Paris." {
		t.Errorf("first answer %q", v)
	}
	lines, _ = exportLines(t, "testdata/turns", export.Options{Format: export.FormatShareGPT, System: export.SystemDrop})
	if strings.Contains(lines[0], "helpful assistant") {
		t.Errorf("--system drop kept it: %s", lines[0])
	}
	_, sum = exportLines(t, "testdata/turns", export.Options{Format: export.FormatShareGPT})
	if w := strings.Join(sum.Warnings, "\n"); !strings.Contains(w, "cnets.py") || !strings.Contains(w, "--system merge") {
		t.Errorf("keep with system rows: warnings %q", w)
	}
}

// Each filter drops what it names and is counted under its name;
// --dedupe and --max-length likewise.
func TestExportFilters(t *testing.T) {
	cases := []struct {
		opts    export.Options
		written int
		dropped map[string]int
	}{
		{export.Options{Format: export.FormatSpecForge}, 5, map[string]int{export.DropEmpty: 1}},
		{export.Options{Format: export.FormatSpecForge, Drop: []string{export.DropReasoningOnly}}, 5, map[string]int{export.DropReasoningOnly: 1}},
		{export.Options{Format: export.FormatSpecForge, Drop: []string{export.DropNoReasoning}}, 5, map[string]int{export.DropNoReasoning: 1}},
		{export.Options{Format: export.FormatSpecForge, Drop: []string{}, Dedupe: export.DedupePrompt}, 4, map[string]int{export.DroppedDuplicatePrompt: 2}},
		{export.Options{Format: export.FormatSpecForge, Drop: []string{}, Dedupe: export.DedupeAnswer}, 6, map[string]int{}},
		{export.Options{Format: export.FormatSpecForge, Drop: []string{}, MaxLength: 5}, 2, map[string]int{export.DroppedPromptTooLong: 4}},
		{export.Options{Format: export.FormatSpeculators, Drop: []string{export.DropNonTargetTurns}, MaxLength: 9}, 4, map[string]int{export.DropNonTargetTurns: 2, export.DroppedPromptTooLong: 2}},
	}
	for i, c := range cases {
		_, sum := exportLines(t, "testdata/turns", c.opts)
		if sum.RowsWritten != c.written || fmt.Sprint(nonZero(sum.Dropped)) != fmt.Sprint(c.dropped) {
			t.Errorf("case %d: %d written, dropped %v; want %d, %v", i, sum.RowsWritten, sum.Dropped, c.written, c.dropped)
		}
	}
	_, sum := exportLines(t, "testdata/turns", export.Options{Format: export.FormatSpecForge, Drop: []string{}, MaxLength: 14})
	if sum.OverMaxLength != 2 || sum.Length.Max != 16 || sum.Length.P50 != 11 {
		t.Errorf("--max-length 14: %d over, lengths %+v; want 2 over (q-7 and its copy, 16 tokens), max 16, p50 11", sum.OverMaxLength, sum.Length)
	}
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

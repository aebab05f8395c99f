package producer

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/hfdataset"
	"github.com/aerie-dev/aerie/schema"
)

// extractionConfig is an extraction run of file: 4 layers of 16, BF16.
func (e *testEnv) extractionConfig(file string) Config {
	cfg := e.config(file)
	cfg.Task = schema.TaskHiddenStates
	cfg.Extraction = &schema.Extraction{LayerIDs: []int{2, 5, 8, 11}, HiddenSize: 16, DType: "BF16"}
	return cfg
}

// An extraction run queues each row as the sample of its idx, with its
// ids and mask, and its manifest records the task, the layers and the
// tokens; every message needs the task.
func TestExtractionRunQueuesRowsByIdx(t *testing.T) {
	e := setup(t)
	cfg := e.extractionConfig(e.file(t, "rows.jsonl", []string{
		`{"id":"a","primary_id":"a","input_ids":[1,2,3],"loss_mask":[0,1,1],"metadata":{"turn":1}}`,
		`{"input_ids":[4,5],"loss_mask":[0,0]}`,
		`{"input_ids":[6],"loss_mask":[1]}`,
	}))
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tokens != 6 || rep.Bytes != 6*(4*16*2+8) {
		t.Errorf("report: %d tokens, %d bytes", rep.Tokens, rep.Bytes)
	}
	m := storedManifest(t, e.js, cfg.Run)
	if m.Task != schema.TaskHiddenStates || m.Extraction == nil || m.Extraction.Tokens != 6 || !slices.Contains(m.Needs, schema.FeatureTaskHiddenStates) {
		t.Fatalf("manifest: task %q, extraction %+v, needs %v", m.Task, m.Extraction, m.Needs)
	}
	got := map[string]*schema.Prompt{}
	for _, msg := range fetchPrompts(t, e.js, cfg.Run, 3) {
		if h := msg.Headers().Get(schema.HeaderNeeds); !strings.Contains(h, schema.FeatureTaskHiddenStates) {
			t.Errorf("message needs %q", h)
		}
		p, err := schema.DecodePrompt(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		got[p.ID] = p
	}
	if p := got["0"]; p == nil || !slices.Equal(p.InputIDs, []int64{1, 2, 3}) || !slices.Equal(p.LossMask, []int{0, 1, 1}) {
		t.Errorf("sample 0: %+v", p)
	}
	if p := got["2"]; p == nil || !slices.Equal(p.InputIDs, []int64{6}) {
		t.Errorf("sample 2: %+v", p)
	}
}

// Bad rows are refused with their line, and nothing is queued: no ids, a
// mask of another length, an id beyond the vocabulary, a sample longer
// than the context.
func TestExtractionRefusesBadRows(t *testing.T) {
	e := setup(t)
	cfg := e.extractionConfig(e.file(t, "rows.jsonl", []string{
		`{"input_ids":[1,2,3],"loss_mask":[0,1,1]}`,
		`{"loss_mask":[0]}`,
		`{"input_ids":[1,2],"loss_mask":[1]}`,
		`{"input_ids":[1,99],"loss_mask":[0,1]}`,
		`{"input_ids":[1,2,3,4,5,6],"loss_mask":[0,0,0,0,0,1]}`,
		`{"input_ids":[],"loss_mask":[]}`,
	}))
	cfg.VocabSize, cfg.MaxInputTokens = 50, 5
	_, err := Run(ctxFor(t), e.js, cfg)
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Invalid != 5 {
		t.Fatalf("%v", err)
	}
	msg := err.Error()
	for _, want := range []string{"rows.jsonl:2", "no \"input_ids\"", "rows.jsonl:3", "1 values for 2", "rows.jsonl:4", "beyond the vocabulary of 50", "rows.jsonl:5", "more than the server's context allows (5)", "rows.jsonl:6", "is empty"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if n := storedPrompts(t, e.js); n != 0 {
		t.Errorf("%d messages queued", n)
	}
}

// Skipping invalid rows would shift the idx of every later one: refused.
func TestExtractionRefusesSkipInvalid(t *testing.T) {
	e := setup(t)
	cfg := e.extractionConfig(e.file(t, "rows.jsonl", []string{`{"input_ids":[1],"loss_mask":[1]}`}))
	cfg.SkipInvalid = true
	if _, err := Run(ctxFor(t), e.js, cfg); err == nil || !strings.Contains(err.Error(), "shift every later one") {
		t.Fatalf("%v", err)
	}
}

// A speculators preprocessed dataset (a save_to_disk directory) is read
// as it is: row i is the sample of idx i; a bad row is named by row.
func TestExtractionReadsASavedDataset(t *testing.T) {
	e := setup(t)
	dir := filepath.Join(e.dir, "preprocessed")
	rows := []hfdataset.Row{
		{InputIDs: []int64{1, 2, 3}, LossMask: []int{0, 1, 1}},
		{InputIDs: []int64{9, 8}, LossMask: []int{0, 1}},
	}
	if err := hfdataset.Write(dir, len(rows), func(i int) (hfdataset.Row, error) { return rows[i], nil }); err != nil {
		t.Fatal(err)
	}
	cfg := e.extractionConfig(dir)
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Valid != 2 || rep.Tokens != 5 {
		t.Fatalf("report: %+v", rep)
	}
	got := map[string]*schema.Prompt{}
	for _, msg := range fetchPrompts(t, e.js, cfg.Run, 2) {
		p, err := schema.DecodePrompt(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		got[p.ID] = p
	}
	if p := got["1"]; p == nil || !slices.Equal(p.InputIDs, []int64{9, 8}) || !slices.Equal(p.LossMask, []int{0, 1}) {
		t.Errorf("idx 1: %+v", p)
	}

	bad := filepath.Join(e.dir, "bad")
	if err := hfdataset.Write(bad, 2, func(i int) (hfdataset.Row, error) {
		return hfdataset.Row{InputIDs: []int64{int64(i * 100)}, LossMask: []int{1}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg = e.extractionConfig(bad)
	cfg.Run, cfg.VocabSize = "r2", 50
	_, err = Run(ctxFor(t), e.js, cfg)
	if err == nil || !strings.Contains(err.Error(), "bad:2: idx 1:") || !strings.Contains(err.Error(), "beyond the vocabulary") {
		t.Fatalf("%v", err)
	}
}

// The largest token id is put to the server before anything is queued;
// a refusal names the sample that holds it.
func TestExtractionChecksTheLargestID(t *testing.T) {
	e := setup(t)
	cfg := e.extractionConfig(e.file(t, "rows.jsonl", []string{
		`{"input_ids":[1,2,3],"loss_mask":[0,1,1]}`,
		`{"input_ids":[4,700,5],"loss_mask":[0,1,1]}`,
		`{"input_ids":[6],"loss_mask":[1]}`,
	}))
	var asked int64 = -1
	cfg.CheckTokenIDs = func(_ context.Context, maxID int64) error {
		asked = maxID
		return errors.New("Token id 700 is out of vocabulary")
	}
	_, err := Run(ctxFor(t), e.js, cfg)
	if asked != 700 || err == nil || !strings.Contains(err.Error(), "line 2 (idx 1)") || !strings.Contains(err.Error(), "out of vocabulary") {
		t.Fatalf("asked about %d: %v", asked, err)
	}
	if n := storedPrompts(t, e.js); n != 0 {
		t.Errorf("%d messages queued", n)
	}
}

package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/aerie-dev/aerie/schema"
)

// An extraction sample (a run of schema.TaskHiddenStates) is a row of
// token ids and their training mask, as speculators' preprocessing and
// aerie's own speculators export write them: {"input_ids": [...],
// "loss_mask": [...]} with any other field (id, primary_id, metadata)
// ignored. Its id is its idx: its place among the file's records, from
// 0, which is the row of the output dataset and the number of its
// hidden_states/hs_<idx>.safetensors.

// extractionFields are the fields of an extraction row aerie reads.
type extractionFields struct {
	InputIDs json.RawMessage `json:"input_ids"`
	LossMask json.RawMessage `json:"loss_mask"`
}

// parseExtraction reads the extraction row of idx from a JSONL line.
func parseExtraction(line []byte, idx int) (Line, error) {
	var f extractionFields
	if err := json.Unmarshal(line, &f); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return Line{}, fmt.Errorf("not valid JSON (at byte %d): %w", syn.Offset, err)
		}
		return Line{}, fmt.Errorf("not a JSON object with input_ids and loss_mask: %w", err)
	}
	if !present(f.InputIDs) {
		return Line{}, errors.New(`no "input_ids": an extraction row is {"input_ids": [token ids], "loss_mask": [0 or 1 each]}, as aerie export --format speculators writes`)
	}
	var ids []int64
	if err := json.Unmarshal(f.InputIDs, &ids); err != nil {
		return Line{}, fmt.Errorf(`"input_ids" must be an array of token ids (integers): %w`, err)
	}
	var mask []int
	if present(f.LossMask) {
		if err := json.Unmarshal(f.LossMask, &mask); err != nil {
			return Line{}, fmt.Errorf(`"loss_mask" must be an array of 0 and 1: %w`, err)
		}
	} else {
		return Line{}, errors.New(`no "loss_mask": speculators' trainer reads it beside the hidden states; give 0 for prompt tokens and 1 for the answer's`)
	}
	return ExtractionLine(idx, ids, mask)
}

// ExtractionLine checks an extraction sample's ids and mask and returns
// its Line, whose ID is idx.
func ExtractionLine(idx int, ids []int64, mask []int) (Line, error) {
	if len(ids) == 0 {
		return Line{}, errors.New(`"input_ids" is empty: a sample needs at least one token`)
	}
	for i, id := range ids {
		if id < 0 {
			return Line{}, fmt.Errorf(`"input_ids"[%d] is %d: token ids are not negative`, i, id)
		}
	}
	if len(mask) != len(ids) {
		return Line{}, fmt.Errorf(`"loss_mask" has %d values for %d input_ids: give one per token`, len(mask), len(ids))
	}
	for i, m := range mask {
		if m != 0 && m != 1 {
			return Line{}, fmt.Errorf(`"loss_mask"[%d] is %d: use 0 (not trained on) or 1`, i, m)
		}
	}
	return Line{ID: strconv.Itoa(idx), InputIDs: ids, LossMask: mask}, nil
}

// CheckExtraction refuses a sample the server cannot extract: a token id
// at or beyond vocab (0: unchecked), or more tokens than maxTokens (0:
// unchecked).
func CheckExtraction(l *Line, vocab, maxTokens int) error {
	if maxTokens > 0 && len(l.InputIDs) > maxTokens {
		return fmt.Errorf("%d tokens, more than the server's context allows (%d): shorten the sample or serve a longer --max-model-len", len(l.InputIDs), maxTokens)
	}
	if vocab > 0 {
		for i, id := range l.InputIDs {
			if id >= int64(vocab) {
				return fmt.Errorf(`"input_ids"[%d] is %d, beyond the vocabulary of %d tokens: the input was tokenized for another model`, i, id, vocab)
			}
		}
	}
	return nil
}

// taskCheck says whether task is one ParseOptions reads.
func taskCheck(task string) error {
	switch task {
	case "", schema.TaskChat, schema.TaskHiddenStates:
		return nil
	}
	return fmt.Errorf("task %q: use %s or %s", task, schema.TaskChat, schema.TaskHiddenStates)
}

package schema

import (
	"fmt"
	"strconv"
)

// TaskHiddenStates is the task kind of a hidden-state extraction run:
// each sample is a row of token ids, sent to a server that writes the
// target model's hidden states of every token to a file (vLLM's
// extract_hidden_states method and its hidden-states connector), which
// the worker checks and publishes as <out>/hidden_states/hs_<idx>.safetensors.
const TaskHiddenStates = "hidden-states"

// FeatureTaskHiddenStates is the feature a hidden-state extraction run
// needs (TaskFeature of TaskHiddenStates).
const FeatureTaskHiddenStates = "task-" + TaskHiddenStates

// HiddenStatesDir is the directory of an extraction run's output that
// holds one file per sample, as speculators' trainer reads it.
const HiddenStatesDir = "hidden_states"

// Extraction is what an extraction run extracts: the settings every
// worker checks each file against, the same for every sample.
type Extraction struct {
	// LayerIDs are the target's layers whose outputs are saved, in the
	// order of the file's layer axis (the server's
	// eagle_aux_hidden_state_layer_ids); a file holds len(LayerIDs)
	// layers.
	LayerIDs []int `json:"layer_ids"`
	// HiddenSize is the target's hidden size (7168 for Kimi-K2 and
	// DeepSeek-V3).
	HiddenSize int `json:"hidden_size"`
	// DType is the hidden states' safetensors dtype: BF16, F16 or F32.
	DType string `json:"dtype"`
	// Tokens is the input tokens of every sample of the run, summed: with
	// BytesPerToken, the size of the run's output.
	Tokens int64 `json:"tokens"`
	// Out, when set, is the directory the run's output goes to on every
	// worker and aggregator host; empty, each uses <its data dir>/<run>.
	// A worker's --out overrides it.
	Out string `json:"out,omitempty"`
}

// DTypeSize is the bytes of one value of a safetensors dtype aerie
// writes or reads hidden states in; 0 for any other.
func DTypeSize(dtype string) int {
	switch dtype {
	case "BF16", "F16":
		return 2
	case "F32":
		return 4
	}
	return 0
}

// BytesPerToken is the bytes a token takes in a file: its hidden states
// at every layer, and its id (I64).
func (x *Extraction) BytesPerToken() int64 {
	return int64(len(x.LayerIDs))*int64(x.HiddenSize)*int64(DTypeSize(x.DType)) + 8
}

// Bytes is the size of the run's files, their headers aside.
func (x *Extraction) Bytes() int64 { return x.Tokens * x.BytesPerToken() }

// Validate refuses settings no file can match.
func (x *Extraction) Validate() error {
	if len(x.LayerIDs) == 0 {
		return fmt.Errorf("layer ids: none given: name the target's layers the server saves, e.g. 2,30,58,61 for a 61-layer model")
	}
	for _, id := range x.LayerIDs {
		if id < 0 {
			return fmt.Errorf("layer ids: %d is not a layer", id)
		}
	}
	if x.HiddenSize <= 0 {
		return fmt.Errorf("hidden size %d: give the target's hidden_size from its config.json", x.HiddenSize)
	}
	if DTypeSize(x.DType) == 0 {
		return fmt.Errorf("dtype %q: use BF16, F16 or F32, the model's dtype", x.DType)
	}
	return nil
}

// HiddenStatesFile is a sample's published extraction file, as its
// result names it.
type HiddenStatesFile struct {
	// Index is the sample's idx: its row in the run's input, and in the
	// output dataset beside the file.
	Index int `msgpack:"idx" json:"idx"`
	// File is the file's path relative to the run's output directory:
	// hidden_states/hs_<idx>.safetensors.
	File string `msgpack:"file" json:"file"`
	// Bytes and SHA256 are the file's size and checksum, as verified.
	Bytes  int64  `msgpack:"bytes" json:"bytes"`
	SHA256 string `msgpack:"sha256" json:"sha256"`
	// Shape is hidden_states' [tokens, layers, hidden] and DType its
	// dtype.
	Shape []int  `msgpack:"shape" json:"shape"`
	DType string `msgpack:"dtype" json:"dtype"`
}

// SampleIndex is the idx of an extraction sample of id: its row number
// in the input, which is its id.
func SampleIndex(id string) (int, error) {
	n, err := strconv.Atoi(id)
	if err != nil || n < 0 || strconv.Itoa(n) != id {
		return 0, fmt.Errorf("extraction sample id %q is not a row number", id)
	}
	return n, nil
}

// TaskKind is the run's task kind: Task, or TaskChat.
func (m *Manifest) TaskKind() string {
	if m.Task == "" {
		return TaskChat
	}
	return m.Task
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aerie-dev/aerie/schema"
)

// taskFlags choose the run's task kind and, for hidden-state
// extraction, what is extracted and where it goes.
type taskFlags struct {
	task       string
	layerIDs   layerIDs
	hiddenSize int
	dtype      string
	out        string
	vocabSize  int
}

// layerIDs is a comma-separated list of layer ids.
type layerIDs []int

func (l *layerIDs) String() string {
	s := make([]string, len(*l))
	for i, id := range *l {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

func (l *layerIDs) Set(v string) error {
	var ids []int
	for _, f := range strings.Split(v, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return fmt.Errorf("%q is not a layer id: give the layers as numbers, e.g. 2,30,58,61", f)
		}
		ids = append(ids, id)
	}
	*l = ids
	return nil
}

func addTaskFlags(fs *flag.FlagSet, tf *taskFlags) {
	fs.StringVar(&tf.task, "task", schema.TaskChat, "what the run does: chat (answer each prompt) or hidden-states (extract the target model's hidden states of each sample of token ids, for offline drafter training)")
	fs.Var(&tf.layerIDs, "layer-ids", "with --task hidden-states: the layers the server saves, in its order (its eagle_aux_hidden_state_layer_ids), e.g. 2,30,58,61 for a 61-layer target such as Kimi-K2 or DeepSeek-V3")
	fs.IntVar(&tf.hiddenSize, "hidden-size", 0, "with --task hidden-states: the target's hidden_size (its config.json), e.g. 7168 for Kimi-K2 and DeepSeek-V3")
	fs.StringVar(&tf.dtype, "dtype", "BF16", "with --task hidden-states: the hidden states' dtype as the server writes them: BF16, F16 or F32 (the model's)")
	fs.StringVar(&tf.out, "out", "", "with --task hidden-states: the directory every worker and aggregator writes the run's dataset and hidden_states/ to (a disk they share with the servers); default <data-dir>/<run>/ of each")
	fs.IntVar(&tf.vocabSize, "vocab-size", 0, "with --task hidden-states: refuse samples with a token id at or beyond this (0: only the server's own check of the largest id, when a backend is given)")
}

// extraction is the run's extraction settings, nil for chat; a flag
// given for the wrong task is refused.
func (tf *taskFlags) extraction(fs *flag.FlagSet) (*schema.Extraction, error) {
	switch tf.task {
	case schema.TaskChat:
		var given []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "layer-ids", "hidden-size", "dtype", "out", "vocab-size":
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			return nil, fmt.Errorf("%s apply to --task hidden-states only", strings.Join(given, ", "))
		}
		return nil, nil
	case schema.TaskHiddenStates:
	default:
		return nil, fmt.Errorf("--task %q: use chat or hidden-states", tf.task)
	}
	var errs []error
	if len(tf.layerIDs) == 0 {
		errs = append(errs, errors.New("--layer-ids is required with --task hidden-states: the layers the server saves, e.g. 2,30,58,61 for a 61-layer target (speculators' launcher takes 2, L/2, L-3 and L)"))
	}
	if tf.hiddenSize <= 0 {
		errs = append(errs, errors.New("--hidden-size is required with --task hidden-states: the target's hidden_size, e.g. 7168 for Kimi-K2 and DeepSeek-V3"))
	}
	if schema.DTypeSize(tf.dtype) == 0 {
		errs = append(errs, fmt.Errorf("--dtype %q: use BF16, F16 or F32", tf.dtype))
	}
	if tf.vocabSize < 0 {
		errs = append(errs, fmt.Errorf("--vocab-size %d: give the model's vocabulary size, or 0", tf.vocabSize))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	x := &schema.Extraction{LayerIDs: tf.layerIDs, HiddenSize: tf.hiddenSize, DType: tf.dtype}
	if tf.out != "" {
		abs, err := filepath.Abs(tf.out)
		if err != nil {
			return nil, fmt.Errorf("--out: %w", err)
		}
		x.Out = abs
	}
	return x, nil
}

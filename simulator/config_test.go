package simulator

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestWithDefaults(t *testing.T) {
	got := Config{}.WithDefaults()
	want := Config{
		Model: DefaultModel, MaxModelLen: DefaultMaxModelLen, MaxNumSeqs: DefaultMaxNumSeqs,
		Engine: EngineVLLM, Speed: DefaultSpeed, ReasoningField: DefaultReasoningField,
		StepBase: DefaultStepBase, StepPerSeq: DefaultStepPerSeq, PrefillPerToken: DefaultPrefillPerToken,
		OutputMedian: DefaultOutputMedian, OutputSigma: DefaultOutputSigma,
		ReasoningShare: DefaultReasoningShare, KVCacheTokens: DefaultKVCacheTokens, PrefixCache: DefaultPrefixCache,
		HiddenLayerIDs: DefaultHiddenLayerIDs, HiddenSize: DefaultHiddenSize, HiddenDType: DefaultHiddenDType, VocabSize: DefaultVocabSize,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	kept := Config{Model: "m", Speed: 3, StepBase: time.Second, ReasoningShare: -1}.WithDefaults()
	if kept.Model != "m" || kept.Speed != 3 || kept.StepBase != time.Second || kept.ReasoningShare != -1 {
		t.Errorf("set fields overwritten: %+v", kept)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"speed", func(c *Config) { c.Speed = -1 }, "simulator: speed must be > 0, got -1"},
		{"field", func(c *Config) { c.ReasoningField = "thoughts" }, `got "thoughts"`},
		{"seqs", func(c *Config) { c.MaxNumSeqs = -2 }, "max num seqs must be >= 1, got -2"},
		{"len", func(c *Config) { c.MaxModelLen = 1 }, "max model len must be >= 2, got 1"},
		{"step", func(c *Config) { c.StepBase = -time.Millisecond }, "step base must be > 0"},
		{"median", func(c *Config) { c.OutputMedian = -5 }, "output median must be >= 1, got -5"},
		{"sigma", func(c *Config) { c.OutputSigma = 9 }, "output sigma must be in [0, 5], got 9"},
		{"share", func(c *Config) { c.ReasoningShare = 1 }, "reasoning share must be < 1, got 1"},
		{"kv", func(c *Config) { c.KVCacheTokens = -1 }, "kv cache tokens must be >= 1"},
		{"kv below context", func(c *Config) { c.KVCacheTokens = 1000 }, "kv cache tokens (1000) cannot hold one sequence of max model len (262144)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{}.WithDefaults()
			tt.modify(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
			if _, err := New(c); err == nil {
				t.Errorf("New accepted an invalid config")
			}
		})
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	c := Config{}.WithDefaults()
	c.Speed, c.MaxNumSeqs = -1, -1
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "speed") || !strings.Contains(err.Error(), "max num seqs") {
		t.Errorf("Validate() = %v, want both problems", err)
	}
}

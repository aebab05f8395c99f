package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/simulator"
)

// The simulator's flags set the KV cache, and a step time per sequence
// or per prompt token of 0 means none, not the default.
func TestSimFlags(t *testing.T) {
	parse := func(args ...string) simulator.Config {
		t.Helper()
		fs := flag.NewFlagSet("sim", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c := addSimFlags(fs, "sim-")
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return c.WithDefaults()
	}
	d := parse()
	if want := (simulator.Config{}).WithDefaults(); d.StepPerSeq != want.StepPerSeq || d.PrefillPerToken != want.PrefillPerToken || d.KVCacheTokens != want.KVCacheTokens {
		t.Errorf("defaults: step per seq %v, prefill per token %v, KV %d; want the simulator's", d.StepPerSeq, d.PrefillPerToken, d.KVCacheTokens)
	}
	c := parse("--sim-max-num-seqs", "96", "--sim-step-base", "60ms", "--sim-step-per-seq", "0",
		"--sim-prefill-per-token", "0", "--sim-kv-cache-tokens", "400000")
	if c.MaxNumSeqs != 96 || c.StepBase != 60*time.Millisecond || c.StepPerSeq >= 0 || c.PrefillPerToken >= 0 || c.KVCacheTokens != 400_000 {
		t.Errorf("parsed %+v", c)
	}
	// One answer of n tokens then takes n steps of exactly 60ms.
	v, err := simulator.NewVirtual(c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := v.Submit(0, []simulator.Message{{Role: "user", Content: "flat"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.AdvanceTo(time.Hour)
	if want := time.Duration(r.Length()) * 60 * time.Millisecond; r.Finished != want {
		t.Errorf("an answer of %d tokens finished at %v, want %v", r.Length(), r.Finished, want)
	}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addSimFlags(fs, "")
	if err := fs.Parse([]string{"--step-per-seq", "-1ms"}); err == nil {
		t.Error("a negative step per seq was accepted")
	}
	// --lengths sets both shape flags; one given after it overrides its part.
	if h := parse("--sim-lengths", "heavy-tail"); h.OutputMedian != 146 || h.OutputSigma != 1.2 {
		t.Errorf("heavy-tail: median %d, sigma %v; want 146 and 1.2", h.OutputMedian, h.OutputSigma)
	}
	if h := parse("--sim-lengths", "heavy-tail", "--sim-output-sigma", "1.5"); h.OutputMedian != 146 || h.OutputSigma != 1.5 {
		t.Errorf("heavy-tail then sigma 1.5: median %d, sigma %v; want 146 and 1.5", h.OutputMedian, h.OutputSigma)
	}
	fs = flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addSimFlags(fs, "")
	if err := fs.Parse([]string{"--lengths", "long"}); err == nil {
		t.Error("an unknown length preset was accepted")
	}
}

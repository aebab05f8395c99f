package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// The worker flags give one worker configuration; --window-poll and
// --hand-back-after not given leave the worker its defaults (which it
// shortens against aerie run's sped-up simulator), and
// --hand-back-after 0 never hands back.
func TestWorkerFlagsConfig(t *testing.T) {
	for _, c := range []struct {
		args     []string
		poll     time.Duration
		handBack time.Duration
	}{
		{nil, 0, 0},
		{[]string{"--window-poll", "2s", "--hand-back-after", "7s"}, 2 * time.Second, 7 * time.Second},
		{[]string{"--hand-back-after", "0"}, 0, -1},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		wf := addWorkerFlags(fs)
		if err := fs.Parse(append(c.args, "--window", "auto", "--grace", "3s", "--hedge", "off")); err != nil {
			t.Fatal(err)
		}
		cfg, err := wf.config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.WindowPoll != c.poll || cfg.HandBackAfter != c.handBack || !cfg.AutoWindow || cfg.Grace != 3*time.Second || !cfg.HedgeOff {
			t.Errorf("%v: %+v; want poll %v, hand back after %v", c.args, cfg, c.poll, c.handBack)
		}
	}
}

func TestCheckEngineFlag(t *testing.T) {
	for _, ok := range []string{"", "auto", "vllm", "SGLang", "tensorrt-llm", "llama.cpp"} {
		if err := checkEngineFlag(ok); err != nil {
			t.Errorf("--engine %q: %v", ok, err)
		}
	}
	if err := checkEngineFlag("tgi"); err == nil || !strings.Contains(err.Error(), "--engine: unknown engine \"tgi\"") {
		t.Errorf("--engine tgi: %v", err)
	}
}

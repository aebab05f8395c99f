package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/simulator"
)

// enginePrompts is how many prompts each engine's run takes: a few
// hundred in make test, AERIE_ENGINE_PROMPTS (3,000 in make engines)
// for the figures. Each injected 429 or 503 asks to be retried after a
// second of wall time, which sets the pace of these runs.
func enginePrompts(t *testing.T) int {
	if v := os.Getenv("AERIE_ENGINE_PROMPTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("AERIE_ENGINE_PROMPTS=%q: want a count", v)
		}
		return n
	}
	return 150
}

// preflight is the doctor's preflight, as aerie run wires it.
func preflight(cfg *pipeline.Config, samples int, tokenIDs bool) {
	cfg.Preflight = func(ctx context.Context, natsURL, backendURL, model string) error {
		return doctor.Preflight(ctx, doctor.Config{NATSURL: natsURL, Run: cfg.Run, Model: model, Backend: backendURL, BackendWait: doctor.DefaultBackendWait,
			Engine: cfg.Engine, Workers: cfg.Workers, Window: cfg.Worker.Window, AutoWindow: cfg.Worker.AutoWindow,
			YieldToServing: cfg.Worker.YieldToServing, Samples: samples, ReturnTokenIDs: tokenIDs})
	}
}

// Every engine's dialect of the simulator, under 10% of 429 and 503
// (and, where the engine sends them, errors inside a 200 stream), with a
// fixed window and with --window auto: every prompt is written exactly
// once and none fails.
func TestExactlyOnceOnEveryEngine(t *testing.T) {
	n := enginePrompts(t)
	for _, eng := range simulator.Engines() {
		for _, auto := range []bool{false, true} {
			name := eng + "-fixed"
			if auto {
				name = eng + "-auto"
			}
			t.Run(name, func(t *testing.T) {
				// Each run waits mostly on its injected faults' Retry-After.
				t.Parallel()
				cfg := config(t, "r", promptsFile(t, n))
				cfg.Sim.Engine = eng
				cfg.Sim.Faults = simulator.Faults{Rate429: 0.05, Rate503: 0.03, StreamErrorRate: 0.02}
				cfg.Worker.AutoWindow, cfg.Worker.MaxWindow = auto, 48
				preflight(&cfg, 1, false)
				sum, err := pipeline.Run(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				lines := readOutput(t, sum.Completions)
				ids := map[string]int{}
				for _, l := range lines {
					ids[l.ID]++
				}
				twice := 0
				for _, c := range ids {
					twice += c - 1
				}
				t.Logf("%s: %d prompts, %d written, %d twice, %d failed, %.0f prompts/s", name, n, len(lines), twice, sum.Failed, sum.RequestsPerSec)
				if !sum.Done || sum.Completed != n || sum.Failed != 0 || len(ids) != n || twice != 0 {
					t.Fatalf("done %v, %d completed, %d failed, %d distinct of %d lines; want %d once each", sum.Done, sum.Completed, sum.Failed, len(ids), len(lines), n)
				}
			})
		}
	}
}

// The features whose form differs by engine run on each engine that
// has them, in the form that engine takes.
func TestFeaturesOnEveryEngine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		engine   string
		samples  int
		tokenIDs bool
		turnsAll bool
		yield    bool
		// maxQueued bounds the server's queue (SGLang's
		// --max-queued-requests) below what the workers hold: 503s.
		maxQueued int
	}{
		{"sglang token ids, unstreamed", simulator.EngineSGLang, 1, true, false, false, 0},
		{"vllm token ids, streamed", simulator.EngineVLLM, 1, true, false, false, 0},
		{"llamacpp samples as requests", simulator.EngineLlamaCpp, 3, false, false, false, 0},
		{"sglang samples by n", simulator.EngineSGLang, 3, false, false, false, 0},
		{"trtllm samples by n", simulator.EngineTRTLLM, 3, false, false, false, 0},
		{"sglang yields", simulator.EngineSGLang, 1, false, false, true, 0},
		{"trtllm yields", simulator.EngineTRTLLM, 1, false, false, true, 0},
		{"llamacpp turns all", simulator.EngineLlamaCpp, 1, false, true, false, 0},
		{"trtllm turns all", simulator.EngineTRTLLM, 1, false, true, false, 0},
		{"sglang queue full", simulator.EngineSGLang, 1, false, false, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 120
			cfg := config(t, "r", promptsFile(t, n))
			cfg.Sim.Engine = tc.engine
			cfg.Sim.SchedulingPolicy = simulator.SchedulingPriority
			cfg.Samples, cfg.ReturnTokenIDs = tc.samples, tc.tokenIDs
			if tc.turnsAll {
				cfg.Turns = "all"
			}
			cfg.Worker.YieldToServing = tc.yield
			if tc.maxQueued > 0 {
				cfg.Sim.MaxNumSeqs, cfg.Sim.MaxQueued = 8, tc.maxQueued
			}
			preflight(&cfg, tc.samples, tc.tokenIDs)
			sum, err := pipeline.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := n * tc.samples
			if !sum.Done || sum.Completed != want || sum.Failed != 0 {
				t.Fatalf("done %v, %d completed, %d failed; want %d", sum.Done, sum.Completed, sum.Failed, want)
			}
			out, err := os.ReadFile(sum.Completions)
			if err != nil {
				t.Fatal(err)
			}
			if tc.tokenIDs && strings.Count(string(out), `"token_ids"`) < want {
				t.Fatalf("token ids in %d of %d lines", strings.Count(string(out), `"token_ids"`), want)
			}
		})
	}
}

// A feature an engine cannot do is refused before anything is queued,
// with the reason and what to do instead.
func TestEngineRefusesWhatItCannotDo(t *testing.T) {
	for _, tc := range []struct {
		name     string
		engine   string
		tokenIDs bool
		yield    bool
		want     string
	}{
		{"trtllm token ids", simulator.EngineTRTLLM, true, false, "returns no token ids on chat answers"},
		{"llamacpp token ids", simulator.EngineLlamaCpp, true, false, "returns no token ids on chat answers"},
		{"llamacpp priority", simulator.EngineLlamaCpp, false, true, "has no request priority"},
		{"sglang without priority scheduling", simulator.EngineSGLang, false, true, "--enable-priority-scheduling"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, "r", promptsFile(t, 20))
			cfg.Sim.Engine = tc.engine
			cfg.ReturnTokenIDs = tc.tokenIDs
			cfg.Worker.YieldToServing = tc.yield
			preflight(&cfg, 1, tc.tokenIDs)
			_, err := pipeline.Run(context.Background(), cfg)
			var pe *doctor.PreflightError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a preflight failure saying %q", err, tc.want)
			}
			if f := pe.Report.Count(doctor.Fail); f != 1 {
				t.Fatalf("%d checks failed, want the engine check alone: %v", f, err)
			}
			if _, serr := os.Stat(fmt.Sprintf("%s/r/completions.jsonl", cfg.DataDir)); serr == nil {
				t.Fatal("a refused run wrote completions")
			}
		})
	}
}

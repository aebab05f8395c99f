package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/aerie-dev/aerie/simulator"
)

// addSimFlags binds the simulator's settings to fs, each flag name
// prefixed (aerie run uses "sim-").
func addSimFlags(fs *flag.FlagSet, prefix string) *simulator.Config {
	d := simulator.Config{}.WithDefaults()
	c := &simulator.Config{}
	fs.StringVar(&c.Model, prefix+"model", d.Model, "model name the simulator serves")
	fs.IntVar(&c.MaxModelLen, prefix+"max-model-len", d.MaxModelLen, "context length in tokens")
	fs.IntVar(&c.MaxNumSeqs, prefix+"max-num-seqs", d.MaxNumSeqs, "running sequences cap (vLLM --max-num-seqs); the rest queue FIFO")
	fs.Float64Var(&c.Speed, prefix+"speed", d.Speed, "time scale: 200 runs simulated time 200x faster than wall time")
	fs.StringVar(&c.ReasoningField, prefix+"reasoning-field", d.ReasoningField, "where reasoning goes: reasoning, reasoning_content or think (inline <think>)")
	fs.Int64Var(&c.Seed, prefix+"seed", d.Seed, "seed for answer lengths and text")
	fs.IntVar(&c.OutputMedian, prefix+"output-median", d.OutputMedian, "median completion tokens")
	fs.Float64Var(&c.OutputSigma, prefix+"output-sigma", d.OutputSigma, "lognormal sigma of completion tokens")
	fs.DurationVar(&c.StepBase, prefix+"step-base", d.StepBase, "decode step time at batch size 0 (simulated)")
	fs.DurationVar(&c.StepPerSeq, prefix+"step-per-seq", d.StepPerSeq, "decode step time added per running sequence (simulated)")
	fs.DurationVar(&c.PrefillPerToken, prefix+"prefill-per-token", d.PrefillPerToken, "engine time per prompt token (simulated)")
	return c
}

func cmdSim(ctx context.Context, args []string) error {
	fs, lf := newFlags("sim", "[--listen 127.0.0.1:8000] [--speed X] [--max-num-seqs N] [--reasoning-field F] [--seed N]")
	listen := fs.String("listen", "127.0.0.1:8000", "host:port to serve on")
	cfg := addSimFlags(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	sim, err := simulator.New(*cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	c := sim.Config()
	log.Info("simulator serving", "url", "http://"+l.Addr().String(), "model", c.Model,
		"max_num_seqs", c.MaxNumSeqs, "speed", c.Speed, "reasoning_field", c.ReasoningField)
	if err := sim.Serve(ctx, l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

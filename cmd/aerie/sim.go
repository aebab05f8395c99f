package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/simulator"
)

// apiKeyEnv is the environment variable aerie sim reads the API key
// from when --api-key is not given, as vllm serve reads it.
const apiKeyEnv = "VLLM_API_KEY"

// addSimFlags binds the simulator's settings to fs, each flag name
// prefixed (aerie run uses "sim-").
func addSimFlags(fs *flag.FlagSet, prefix string) *simulator.Config {
	d := simulator.Config{}.WithDefaults()
	c := &simulator.Config{}
	fs.StringVar(&c.Model, prefix+"model", d.Model, "model name the simulator serves")
	fs.StringVar(&c.APIKey, prefix+"api-key", "", "require Authorization: Bearer KEY on every /v1 path, as vllm serve --api-key (/health, /metrics, /admin/ stay open; rotate with POST /admin/api-key)")
	fs.IntVar(&c.MaxModelLen, prefix+"max-model-len", d.MaxModelLen, "context length in tokens")
	fs.IntVar(&c.MaxNumSeqs, prefix+"max-num-seqs", d.MaxNumSeqs, "running sequences cap (vLLM --max-num-seqs); the rest queue")
	fs.StringVar(&c.SchedulingPolicy, prefix+"scheduling-policy", simulator.SchedulingFCFS, "vLLM's --scheduling-policy: fcfs serves the queue in order and refuses requests with a priority; priority serves lower priority values first and, when the KV cache is full, preempts the running request of the highest value")
	fs.Float64Var(&c.Speed, prefix+"speed", d.Speed, "time scale: 200 runs simulated time 200x faster than wall time")
	fs.StringVar(&c.Engine, prefix+"engine", simulator.EngineVLLM, "the engine whose dialect the simulator speaks: "+strings.Join(simulator.Engines(), ", ")+" (owned_by, reasoning field, priority field, token ids, n, unknown fields, metric names and path)")
	fs.BoolVar(&c.LowPriorityFirst, prefix+"schedule-low-priority-values-first", false, "with --engine sglang: serve lower priority values first, as SGLang's flag of that name (its default is higher first)")
	fs.IntVar(&c.MaxQueued, prefix+"max-queued-requests", 0, "refuse a request with 503 when this many wait for a slot, as SGLang's --max-queued-requests (0: an unbounded queue, as vLLM's)")
	fs.BoolVar(&c.NoMetrics, prefix+"no-metrics", false, "serve no Prometheus metrics, as SGLang without --enable-metrics or llama.cpp without --metrics")
	fs.StringVar(&c.ReasoningField, prefix+"reasoning-field", "", "where reasoning goes: reasoning, reasoning_content or think (inline <think>); default: the engine's (vLLM reasoning, the others reasoning_content)")
	fs.Int64Var(&c.Seed, prefix+"seed", d.Seed, "seed for answer lengths, text and injected faults")
	fs.IntVar(&c.OutputMedian, prefix+"output-median", d.OutputMedian, "median completion tokens")
	fs.Float64Var(&c.OutputSigma, prefix+"output-sigma", d.OutputSigma, "lognormal sigma of completion tokens")
	fs.Func(prefix+"lengths", "a preset of --"+prefix+"output-median and --"+prefix+"output-sigma, which override it when they come after it: reference (median 1400, sigma 0.95: the default) or heavy-tail (median 146, sigma 1.2: a mean of 300 tokens, a few answers past 10,000)", func(name string) error {
		p, ok := simulator.LengthPresets[name]
		if !ok {
			return fmt.Errorf("unknown preset %q: want reference or heavy-tail", name)
		}
		c.OutputMedian, c.OutputSigma = p.Median, p.Sigma
		return nil
	})
	fs.IntVar(&c.KVCacheTokens, prefix+"kv-cache-tokens", d.KVCacheTokens, "KV cache size in tokens (vLLM's \"GPU KV cache size\"): admission waits for room, a full cache preempts the latest admitted request; at least --"+prefix+"max-model-len")
	fs.IntVar(&c.PrefixCache, prefix+"prefix-cache", d.PrefixCache, "prompts kept in the prefix cache, as vLLM's default prefix caching: a prompt found there is not read again, so the n answers of one request read it once; a negative number turns it off (vLLM's --no-enable-prefix-caching)")
	fs.DurationVar(&c.StepBase, prefix+"step-base", d.StepBase, "decode step time at batch size 0 (simulated)")
	c.StepPerSeq, c.PrefillPerToken = d.StepPerSeq, d.PrefillPerToken
	fs.Var(zeroableDuration{&c.StepPerSeq}, prefix+"step-per-seq", "decode step time added per running sequence, a `duration` of simulated time; 0 for a flat --"+prefix+"step-base")
	fs.Var(zeroableDuration{&c.PrefillPerToken}, prefix+"prefill-per-token", "engine time per prompt token, a `duration` of simulated time; 0 for free prompts")
	fs.StringVar(&c.HiddenStatesPath, prefix+"hidden-states-path", "", "extract hidden states as vLLM's extract_hidden_states method with its hidden-states connector: every /v1/completions request's prompt states go to DIR/<request id>.safetensors, written after the reply under a lock on its .lock (empty: none)")
	fs.Func(prefix+"hidden-layer-ids", fmt.Sprintf("the layers extracted, comma separated (eagle_aux_hidden_state_layer_ids; default %s)", joinInts(d.HiddenLayerIDs)), func(v string) error {
		ids, err := parseInts(v)
		c.HiddenLayerIDs = ids
		return err
	})
	fs.IntVar(&c.HiddenSize, prefix+"hidden-size", d.HiddenSize, "the model's hidden size, of every extracted layer")
	fs.StringVar(&c.HiddenDType, prefix+"hidden-dtype", d.HiddenDType, "dtype of the extracted states: BF16, F16 or F32")
	fs.IntVar(&c.VocabSize, prefix+"vocab-size", d.VocabSize, "token ids of a /v1/completions prompt must be below this")
	ff := &c.FileFaults
	fs.Float64Var(&ff.Missing, prefix+"fault-hs-missing", 0, "share of extractions whose file is never written, its lock let go (fault injection; 0-1)")
	fs.Float64Var(&ff.Cut, prefix+"fault-hs-cut", 0, "share of extractions whose file stops part way (fault injection; 0-1)")
	fs.Float64Var(&ff.NaN, prefix+"fault-hs-nan", 0, "share of extractions with a NaN among the hidden states (fault injection; 0-1)")
	fs.Float64Var(&ff.OtherTokens, prefix+"fault-hs-other-tokens", 0, "share of extractions whose file holds a token id that is not the prompt's (fault injection; 0-1)")
	fs.Float64Var(&ff.SlowLock, prefix+"fault-hs-slow-lock", 0, "share of extractions whose lock is held --"+prefix+"fault-hs-slow-lock-for past the reply before the file is written (fault injection; 0-1)")
	fs.DurationVar(&ff.SlowLockFor, prefix+"fault-hs-slow-lock-for", time.Minute, "how long a slow lock is held (simulated time)")
	f := &c.Faults
	fs.Float64Var(&f.Rate429, prefix+"fault-429", 0, "share of requests answered 429 with Retry-After (fault injection; 0-1)")
	fs.Float64Var(&f.Rate500, prefix+"fault-500", 0, "share of requests answered 500 (fault injection; 0-1)")
	fs.Float64Var(&f.Rate503, prefix+"fault-503", 0, "share of requests answered 503 with Retry-After (fault injection; 0-1)")
	fs.Float64Var(&f.Rate400, prefix+"fault-400", 0, "share of requests refused with vLLM's context length 400, which clients treat as permanent (fault injection; 0-1)")
	fs.Float64Var(&f.HangRate, prefix+"fault-hang", 0, "share of requests never answered, until the client gives up (fault injection; 0-1)")
	fs.Float64Var(&f.DisconnectRate, prefix+"fault-disconnect", 0, "share of requests whose connection is cut mid-answer, without [DONE] (fault injection; 0-1)")
	fs.Float64Var(&f.StreamErrorRate, prefix+"fault-stream-error", 0, "share of requests whose generation fails mid-answer: streams get vLLM's in-stream error event then [DONE], others 500 (fault injection; 0-1)")
	fs.DurationVar(&f.SlowFirstByte, prefix+"fault-slow-first-byte", 0, "delay of the first byte of slowed requests (simulated time; see --"+prefix+"fault-slow-first-byte-rate)")
	fs.Float64Var(&f.SlowFirstByteRate, prefix+"fault-slow-first-byte-rate", 0, "share of requests whose first byte is delayed by --"+prefix+"fault-slow-first-byte (fault injection; 0-1)")
	fs.Func(prefix+"outage", "outages START+DURATION:MODE,... in simulated time since start (repeatable); MODE refuse (connections refused) or 503 (every request 503), e.g. 30s+60s:refuse,300s+10s:503", func(spec string) error {
		outages, err := simulator.ParseOutages(spec)
		if err != nil {
			return err
		}
		f.Outages = append(f.Outages, outages...)
		return nil
	})
	return c
}

// zeroableDuration is a duration flag whose 0 means none, which
// simulator.Config spells as a negative duration (its zero means the
// default).
type zeroableDuration struct{ d *time.Duration }

func (z zeroableDuration) String() string {
	if z.d == nil {
		return ""
	}
	return max(*z.d, 0).String()
}

func (z zeroableDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("must be >= 0, got %v", v)
	}
	if v == 0 {
		v = -1
	}
	*z.d = v
	return nil
}

func cmdSim(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "probe" {
		return cmdSimProbe(ctx, args[1:])
	}
	fs, lf := newFlags("sim", "[--listen 127.0.0.1:8000] [--speed X] [--max-num-seqs N] [--scheduling-policy fcfs|priority] [--kv-cache-tokens N] [--step-base D] [--step-per-seq D] [--reasoning-field F] [--seed N] [--api-key KEY]\n       aerie sim probe --rate R [--duration D] [--backend URL]   (an interactive load; see aerie sim probe -h)")
	listen := fs.String("listen", "127.0.0.1:8000", "host:port to serve on")
	cfg := addSimFlags(fs, "")
	fs.Lookup("api-key").Usage += " (default: env " + apiKeyEnv + ")"
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(apiKeyEnv)
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
		"max_num_seqs", c.MaxNumSeqs, "kv_cache_tokens", c.KVCacheTokens,
		"step_base", c.StepBase, "step_per_seq", max(c.StepPerSeq, 0), "speed", c.Speed, "reasoning_field", c.ReasoningField,
		"api_key_required", c.APIKey != "")
	if err := sim.Serve(ctx, l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// parseInts reads a comma-separated list of integers.
func parseInts(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a list of integers", v)
		}
		out = append(out, n)
	}
	return out, nil
}

// joinInts writes ns comma separated.
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

package main

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/aerie-dev/aerie/worker"
)

// windowFlags are --window (a number of requests, or auto) and, for the
// commands that run workers, --max-window, --window-poll and
// --hand-back-after.
type windowFlags struct {
	// fs is the flag set they are declared in, which tells the flags
	// given from those left at their defaults.
	fs            *flag.FlagSet
	size          int
	auto          bool
	max           int
	poll          time.Duration
	handBackAfter time.Duration
	// hedge is --hedge (auto or off) and hedgeMax --hedge-max.
	hedge    string
	hedgeMax int
}

func (f *windowFlags) String() string {
	if f == nil {
		return ""
	}
	if f.auto {
		return "auto"
	}
	return strconv.Itoa(f.size)
}

func (f *windowFlags) Set(v string) error {
	if v == "auto" {
		f.auto, f.size = true, worker.DefaultWindow
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("want a number of requests (at least 1) or auto, got %q", v)
	}
	f.auto, f.size = false, n
	return nil
}

// addWindowFlag declares --window.
func addWindowFlag(fs *flag.FlagSet) *windowFlags {
	f := &windowFlags{size: worker.DefaultWindow, hedge: "auto"}
	fs.Var(f, "window", "requests in flight per worker, exactly (default 200, which suits vLLM's default of 256 running sequences), or auto: sized from the backend's own /metrics to keep its running slots busy with a small queue, starting at 200 and kept there if the backend serves no vLLM metrics; a worker holds up to twice this in prompts: the next generates while one is stored, and with --turns all conversations wait between two turns")
	return f
}

// addWorkerWindowFlags declares --window and what shapes a worker's
// window: --max-window, --window-poll and --hand-back-after.
func addWorkerWindowFlags(fs *flag.FlagSet) *windowFlags {
	f := addWindowFlag(fs)
	f.fs = fs
	fs.IntVar(&f.max, "max-window", worker.DefaultMaxWindow, "with --window auto, the most requests a worker may have in flight")
	fs.DurationVar(&f.poll, "window-poll", worker.DefaultWindowPoll, "with --window auto, how often the backend's /metrics are read (against aerie run's built-in simulator, the default is shorter by --sim-speed)")
	fs.DurationVar(&f.handBackAfter, "hand-back-after", worker.DefaultHandBackAfter, "at the end of a run, a request that has waited this long (and at least 3 times the backend's shortest time to first token) without a first token is handed back for an idle worker of the run; 0 never hands back (against aerie run's built-in simulator, the default is shorter by --sim-speed)")
	fs.StringVar(&f.hedge, "hedge", "auto", "auto: once the run has nothing left to deliver, a worker with free slots sends a second copy of a request that a worker at least 1.5 times slower per request has run for longer than this one would take for the whole answer; the first answer stored is kept and the other copy cancelled. off: never")
	fs.IntVar(&f.hedgeMax, "hedge-max", 0, "with --hedge auto, the most hedges a worker runs at once; 0: as many as its window has free slots")
	return f
}

// check refuses window flags that would be taken for their defaults
// or make no sense: the worker's config reads a zero --max-window or
// --window-poll as "the default", which a user who typed 0 did not mean.
func (f *windowFlags) check() error {
	if f.max < 1 {
		return fmt.Errorf("--max-window %d: want the most requests a worker may have in flight with --window auto, at least 1 (default %d)", f.max, worker.DefaultMaxWindow)
	}
	if f.poll <= 0 {
		return fmt.Errorf("--window-poll %v: want how often the backend's /metrics are read, more than 0 (default %v)", f.poll, worker.DefaultWindowPoll)
	}
	if f.handBackAfter < 0 {
		return fmt.Errorf("--hand-back-after %v: want a wait of at least 0 (0 never hands back)", f.handBackAfter)
	}
	if f.hedge != "auto" && f.hedge != "off" {
		return fmt.Errorf("--hedge %q: want auto (hedge slower workers' requests at the end of a run) or off", f.hedge)
	}
	if f.hedgeMax < 0 {
		return fmt.Errorf("--hedge-max %d: want the most hedges a worker runs at once, at least 0 (0: as many as slots are free)", f.hedgeMax)
	}
	return nil
}

// apply sets cfg's window fields from the flags. --window-poll and
// --hand-back-after, when not given, leave the worker its defaults,
// which it shortens against a sped-up simulator (worker.Config.Speed);
// the flag's 0 for --hand-back-after (never) is worker.Config's negative.
func (f *windowFlags) apply(cfg *worker.Config) {
	cfg.Window, cfg.AutoWindow, cfg.MaxWindow = f.size, f.auto, f.max
	cfg.HedgeOff, cfg.HedgeMax = f.hedge == "off", f.hedgeMax
	given := map[string]bool{}
	if f.fs != nil {
		f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	}
	if given["window-poll"] {
		cfg.WindowPoll = f.poll
	}
	switch {
	case !given["hand-back-after"]:
	case f.handBackAfter == 0:
		cfg.HandBackAfter = -1
	default:
		cfg.HandBackAfter = f.handBackAfter
	}
}

// yieldFlags are a worker's flags for sharing its server with
// interactive requests.
type yieldFlags struct {
	on       bool
	slo      time.Duration
	priority int
}

// addYieldFlags declares --yield-to-serving and what tunes it.
func addYieldFlags(fs *flag.FlagSet) *yieldFlags {
	f := &yieldFlags{}
	fs.BoolVar(&f.on, "yield-to-serving", false, "the backend also takes interactive requests: send every request with vLLM's priority --batch-priority, and cap the window while requests that are not this worker's wait in the server or its time-to-first-token p95 is above --serving-ttft-slo; the server must run vLLM with --scheduling-policy priority")
	fs.DurationVar(&f.slo, "serving-ttft-slo", worker.DefaultServingTTFTSLO, "with --yield-to-serving, the time to first token (p95 over the last minute, from the server's own histogram) the window is held to")
	fs.IntVar(&f.priority, "batch-priority", worker.DefaultBatchPriority, "with --yield-to-serving, the vLLM priority of this worker's requests: interactive ones have 0, and lower goes first")
	return f
}

// check refuses yield flags that make no sense.
func (f *yieldFlags) check() error {
	if f.slo <= 0 {
		return fmt.Errorf("--serving-ttft-slo %v: want a time to first token above 0 (default %v)", f.slo, worker.DefaultServingTTFTSLO)
	}
	if f.on && f.priority <= 0 {
		return fmt.Errorf("--batch-priority %d: want a priority above 0, the interactive requests' (vLLM serves lower values first)", f.priority)
	}
	return nil
}

// apply sets cfg's yield fields from the flags.
func (f *yieldFlags) apply(cfg *worker.Config) {
	cfg.YieldToServing, cfg.ServingTTFTSLO, cfg.BatchPriority = f.on, f.slo, f.priority
}

// workerFlags are what configures a worker, for aerie work and aerie run
// alike: its window, how it shares its server with serving traffic, and
// its grace period.
type workerFlags struct {
	window *windowFlags
	yield  *yieldFlags
	grace  time.Duration
}

// addWorkerFlags declares a worker's flags.
func addWorkerFlags(fs *flag.FlagSet) *workerFlags {
	f := &workerFlags{window: addWorkerWindowFlags(fs), yield: addYieldFlags(fs)}
	fs.DurationVar(&f.grace, "grace", worker.DefaultGrace, "on the first SIGINT/SIGTERM, time in-flight prompts get to finish before they are handed back to the queue")
	return f
}

// config checks the flags and returns the worker configuration they
// give: what the command serves, and its connections, are its own.
func (f *workerFlags) config() (worker.Config, error) {
	if err := f.window.check(); err != nil {
		return worker.Config{}, err
	}
	if err := f.yield.check(); err != nil {
		return worker.Config{}, err
	}
	cfg := worker.Config{Grace: f.grace}
	f.window.apply(&cfg)
	f.yield.apply(&cfg)
	return cfg, nil
}

package chaos

import (
	"errors"
	"fmt"
	"time"
)

// NATS stop modes for Config.NATSStop.
const (
	// StopKill ends the server with SIGKILL: no flush, no clean shutdown.
	// The store is fsynced on every write, so nothing acknowledged may be
	// lost; consumer state written since the last flush may be.
	StopKill = "kill"
	// StopTerm asks the server to shut down cleanly (SIGTERM).
	StopTerm = "term"
)

// Model is the model the simulator serves and the run asks for.
const Model = "moonshotai/Kimi-K2.5"

// Config describes one chaos run. Short and Long return the two runs the
// suite does; a test may change any field before New.
type Config struct {
	// Bin is the aerie binary to run; required.
	Bin string
	// Dir is the work directory: prompts, NATS store, output, one log
	// file per process. Required; it must exist.
	Dir string
	// Run names the aerie run.
	Run string
	// Seed feeds gen-prompts, the simulator's faults and answer lengths,
	// the kill schedule's jitter, the choice of victim and the windows.
	// Processes are not deterministic, so a seed reproduces the
	// conditions of a run, not its exact interleaving.
	Seed int64

	// Prompts is how many prompts gen-prompts writes and produce queues.
	Prompts int
	// Turns, above 1, makes every prompt a conversation of 1 to Turns
	// user turns (gen-prompts --turns), each earlier one followed by an
	// assistant answer, and the run a --turns all one: every assistant
	// turn is generated again, in order, each stored before the next, so
	// that kills and faults land in the middle of conversations. The
	// check then also looks at every line's turns, at the stored turns
	// left at the end and at the requests sent for turns already stored.
	// 0 or 1: single-turn prompts, answered as given (--turns last).
	Turns int
	// Samples, above 1, is produce's --samples: each prompt's samples
	// are queued in one message and answered in one request (n), and
	// every sample must end once, as its own line ("id" for sample 0,
	// "id#k" for sample k in the check's reports). Requests for them
	// are not traced for regeneration: the samples of a prompt share its
	// messages.
	Samples int
	// HiddenStates makes the run a hidden-states one (--task
	// hidden-states): gen-prompts writes samples of token ids, the
	// simulator extracts them into a directory of its own with
	// FileFaultRate of its files bad (missing, cut, a NaN or other token
	// ids, in equal shares), and the check also reads the output as the
	// trainer will (hscheck) and looks for files left in the simulator's
	// directory. HiddenSize is the files' hidden size.
	HiddenStates  bool
	HiddenSize    int
	FileFaultRate float64
	// Workers is how many workers run at once; each one killed is
	// replaced by a new one with a new name.
	Workers int
	// WindowMin and WindowMax bound each worker's --window, drawn at
	// random for every worker started.
	WindowMin, WindowMax int
	// StallTimeout is the workers' --first-token-timeout and
	// --idle-timeout. A hung request holds its slot until then, so it
	// must be short; no answer that is not hung may wait that long for
	// its first token or between two tokens (see Speed).
	StallTimeout time.Duration
	// AckWait is produce's --ack-wait: how soon the prompts of a killed
	// worker come back.
	AckWait time.Duration
	// MaxTokens is produce's --max-tokens. It bounds the longest answer,
	// and so the longest request, to about MaxTokens decode steps.
	MaxTokens int
	// MaxAttempts, when positive, is produce's --max-attempts: the
	// failures of its own a prompt may have before it is dead-lettered.
	// Zero leaves produce's default.
	MaxAttempts int
	// MaxDeliver, when positive, is produce's --max-deliver: deliveries
	// per prompt, killed workers' included. Zero leaves produce's default.
	MaxDeliver int

	// Speed, OutputMedian and OutputSigma are the simulator's time scale
	// and answer length distribution (lognormal, in tokens).
	Speed        float64
	OutputMedian int
	OutputSigma  float64
	// MaxNumSeqs is the simulator's running-sequence cap; above the total
	// of the windows, nothing queues inside the simulator.
	MaxNumSeqs int
	// Rate400, Rate429, Rate500, Rate503, HangRate, DisconnectRate and
	// StreamErrorRate are the simulator's --fault-* shares of requests:
	// 400 is the prompt's fault (a dead letter at once); a stream error
	// is an engine failure in the middle of an answer, the server's.
	Rate400, Rate429, Rate500, Rate503        float64
	HangRate, DisconnectRate, StreamErrorRate float64

	// WorkerKillEvery is the mean interval between two worker kills
	// (each drawn between half and one and a half times it); zero kills
	// no worker.
	WorkerKillEvery time.Duration
	// WorkerKills caps the number of worker kills; zero means no cap.
	WorkerKills int
	// KillFrom and KillUntil bound, as shares of the prompts accounted
	// for in the output files, when workers are killed: from the first
	// answers, until shortly before the end so the run can finish.
	KillFrom, KillUntil float64
	// AggregatorKillsAt lists the shares of progress at which the
	// aggregator is killed and started again.
	AggregatorKillsAt []float64
	// AggregatorKillEvery, when positive, also kills the aggregator at
	// about that interval (jittered like worker kills) while progress is
	// in [KillFrom, KillUntil): a stress setting, zero in Short and Long.
	AggregatorKillEvery time.Duration
	// NATSRestartsAt lists the shares of progress at which the NATS
	// server is stopped (NATSStop) and started again, on the same port
	// and store, after NATSDown.
	NATSRestartsAt []float64
	NATSStop       string
	NATSDown       time.Duration
	// ReplaysAt lists the shares of progress at which `aerie replay`
	// puts every dead-lettered prompt back to work; empty: never. A
	// replayed prompt that completes must move from failed.jsonl to
	// completions.jsonl, and the aggregator must not finish before it
	// has.
	ReplaysAt []float64
	// ReplayAfterDone, once the aggregator has finished the run
	// (--exit-when-done, as deploy/ runs it), replays every dead letter
	// and starts an aggregator again, as an operator would: it must
	// finish only when every replayed prompt has its new outcome.
	ReplayAfterDone bool
	// SecondAggregatorsAt lists the shares of progress at which a second
	// aggregator of the run is started beside the running one, on the
	// same data directory: it must refuse (exit non-zero, naming the
	// first) and write nothing.
	SecondAggregatorsAt []float64
	// KeyRotationsAt lists the shares of progress at which the
	// simulator's API key is changed under the running workers, as when
	// vLLM is restarted with another --api-key; the workers' key file
	// is updated KeyFileLag later. Workers must pause on the 401s and
	// resume once they read the new key, dead-lettering nothing.
	KeyRotationsAt []float64
	KeyFileLag     time.Duration

	// Shared, when set, names a second run served by the same workers
	// (aerie work --runs Run,Shared): SharedPrompts prompts of its own
	// (another seed), produced beside the first, written by an
	// aggregator of its own, and checked like the first: every prompt
	// once in exactly one of its files. At each share of
	// ScheduleChangesAt (of the first run's progress) `aerie runs set`
	// changes its schedule in turn: a priority above the first run's,
	// one below, then equal with three times the weight, and again.
	Shared            string
	SharedPrompts     int
	ScheduleChangesAt []float64

	// Timeout bounds the run from the end of produce to the
	// aggregator's exit; past it the run is reported as stalled.
	Timeout time.Duration
	// StuckAfter ends the run as stalled sooner: when the output files
	// have not grown for that long and no consumer of the run has
	// anything pending or unacknowledged. Zero means 30 seconds.
	StuckAfter time.Duration
	// Logf receives one line per action; nil discards them.
	Logf func(format string, args ...any)
}

// Short is the CI run: about 600 prompts, one worker kill, one
// aggregator kill and one NATS restart, in well under a minute and a half
// on two cores. Its windows are smaller than Long's so that the run
// lasts several answer lengths.
func Short() Config {
	c := base()
	c.Run = "chaos-short"
	c.Prompts = 600
	c.WindowMin, c.WindowMax = 20, 40
	c.WorkerKillEvery = 2 * time.Second
	c.WorkerKills = 1
	c.KillFrom, c.KillUntil = 0.15, 0.9
	c.AggregatorKillsAt = []float64{0.35}
	c.SecondAggregatorsAt = []float64{0.45}
	c.NATSRestartsAt = []float64{0.55}
	c.KeyRotationsAt = []float64{0.65}
	c.Timeout = 3 * time.Minute
	return c
}

// ShortSamples is Short with 3 samples a prompt, each prompt's samples
// answered in one request: 250 prompts, 750 units, one kill of each kind.
func ShortSamples() Config {
	c := Short()
	c.Run = "chaos-short-samples"
	c.Prompts = 250
	c.Samples = 3
	return c
}

// ShortHiddenStates is the CI run of hidden-state extraction: 400
// samples, 5% of the server's files bad, one kill of each kind; a
// sample fails at its first bad file, and is replayed once the run is
// done.
func ShortHiddenStates() Config {
	c := Short()
	c.Run = "chaos-short-hs"
	c.Prompts = 400
	c.HiddenStates, c.HiddenSize, c.FileFaultRate = true, 256, 0.05
	// A sample is one prefill: at Short's speed the run is over in
	// seconds, before a second aggregator has given up or a key
	// rotation is followed. Slower, it lasts about half a minute.
	c.Speed = 1
	// A bad file fails its sample, so that about one in twenty is
	// dead-lettered and replayed once the run is done.
	c.MaxAttempts = 1
	return c
}

// LongHiddenStates is the full run of hidden-state extraction: 2,000
// samples, 5% of the server's files bad, a worker killed every few
// seconds, the aggregator killed twice and the NATS server once.
func LongHiddenStates() Config {
	c := Long()
	c.Run = "chaos-hs"
	c.Prompts = 2000
	c.HiddenStates, c.HiddenSize, c.FileFaultRate = true, 256, 0.05
	c.Speed = 2
	c.MaxAttempts = 1
	return c
}

// LongSamples is Long with 3 samples a prompt answered in one request:
// 1,700 prompts, 5,100 units, a worker killed every few seconds.
func LongSamples() Config {
	c := Long()
	c.Run = "chaos-samples"
	c.Prompts = 1700
	c.Samples = 3
	return c
}

// Long is the full run: about 5,000 prompts, a worker killed every few
// seconds, the aggregator killed twice, the NATS server killed once.
func Long() Config {
	c := base()
	c.Run = "chaos"
	c.Prompts = 5000
	c.WindowMin, c.WindowMax = 50, 100
	c.WorkerKillEvery = 4 * time.Second
	c.KillFrom, c.KillUntil = 0.02, 0.95
	c.AggregatorKillsAt = []float64{0.3, 0.7}
	c.SecondAggregatorsAt = []float64{0.4, 0.75}
	c.NATSRestartsAt = []float64{0.5}
	c.KeyRotationsAt = []float64{0.6, 0.85}
	c.Timeout = 15 * time.Minute
	return c
}

// ShortShared is Short with a second run served by the same workers,
// 300 prompts of its own, whose schedule changes three times while both
// run: its priority above the first's, below it, then equal with three
// times the weight. Every prompt of both must end once.
func ShortShared() Config {
	c := Short()
	c.Run = "chaos-short-shared"
	c.Shared = "chaos-short-second"
	c.SharedPrompts = 300
	c.ScheduleChangesAt = []float64{0.1, 0.3, 0.5}
	c.Timeout = 4 * time.Minute
	return c
}

// LongShared is Long with a second run of 2,500 prompts served by the
// same workers, its schedule changed six times.
func LongShared() Config {
	c := Long()
	c.Run = "chaos-shared"
	c.Shared = "chaos-second"
	c.SharedPrompts = 2500
	c.ScheduleChangesAt = []float64{0.05, 0.15, 0.3, 0.45, 0.6, 0.75}
	c.Timeout = 20 * time.Minute
	return c
}

// ShortTurns is the CI run of conversations: 150 of 1 to 3 user turns
// (about 300 turns), every turn generated with --turns all, under
// Short's faults, with two worker kills (each lands in the middle of
// conversations), one aggregator kill, one NATS restart, a second
// aggregator, a key rotation and the replay once done, in well under a
// minute on two cores.
func ShortTurns() Config {
	c := Short()
	c.Run = "chaos-short-turns"
	c.Prompts = 150
	c.Turns = 3
	c.WorkerKills = 2
	c.KillFrom, c.KillUntil = 0.1, 0.9
	c.AggregatorKillsAt = []float64{0.3}
	c.SecondAggregatorsAt = []float64{0.4}
	c.NATSRestartsAt = []float64{0.5}
	c.KeyRotationsAt = []float64{0.65}
	return c
}

// LongTurns is the full run of conversations: 2,500 of 1 to 3 user
// turns (about 5,000 turns, as many requests as Long), every turn
// generated with --turns all, with Long's faults and kills: a worker
// killed every few seconds in the middle of conversations, the
// aggregator killed twice, the NATS server killed once.
func LongTurns() Config {
	c := Long()
	c.Run = "chaos-turns"
	c.Prompts = 2500
	c.Turns = 3
	return c
}

// Replays is Short with many dead letters put back to work while the
// aggregator is killed every couple of seconds: one attempt per prompt,
// 429 on 15% of requests, `aerie replay` at three points. A replayed
// prompt that fails again must get a dead letter again and end in
// failed.jsonl.
func Replays() Config {
	c := Short()
	c.Run = "chaos-replay"
	c.Prompts = 1000
	c.MaxAttempts = 1
	c.Rate429 = 0.15
	c.ReplaysAt = []float64{0.3, 0.5, 0.7}
	c.AggregatorKillEvery = 2 * time.Second
	// The aggregator is killed every couple of seconds: a second one
	// started beside it could find it dead and rightly take over.
	c.SecondAggregatorsAt = nil
	return c
}

// base holds what Short and Long share: the faults (2% errors split over
// 429, 500 and 503, 0.5% hangs, 0.5% cut streams, 0.5% engine errors in
// the middle of a stream, 0.4% refusals of the prompt), a key rotation
// lag of two seconds, a replay once the run is done, and a simulator
// whose answers take a few seconds of wall time, none of them waiting
// StallTimeout for a token.
func base() Config {
	return Config{
		Seed:            1,
		Workers:         3,
		StallTimeout:    12 * time.Second,
		AckWait:         5 * time.Second,
		MaxTokens:       900,
		Speed:           6,
		OutputMedian:    400,
		OutputSigma:     0.35,
		MaxNumSeqs:      512,
		Rate429:         0.007,
		Rate500:         0.007,
		Rate503:         0.006,
		HangRate:        0.005,
		DisconnectRate:  0.005,
		StreamErrorRate: 0.005,
		Rate400:         0.004,
		ReplayAfterDone: true,
		KeyFileLag:      2 * time.Second,
		NATSStop:        StopKill,
		NATSDown:        2 * time.Second,
	}
}

// turnsAll reports whether the run generates every turn of
// conversations (--turns all).
func (c Config) turnsAll() bool { return c.Turns > 1 }

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("chaos: "+format, args...)) }
	if c.Bin == "" || c.Dir == "" || c.Run == "" {
		bad("Bin, Dir and Run are required")
	}
	if c.MaxAttempts < 0 || c.MaxDeliver < 0 || c.WorkerKills < 0 || c.Turns < 0 {
		bad("max attempts, max deliver, worker kills and turns must not be negative")
	}
	if c.Shared != "" && (c.Shared == c.Run || c.SharedPrompts < 1) {
		bad("a shared run needs a name of its own and at least one prompt, got %q and %d", c.Shared, c.SharedPrompts)
	}
	if c.Prompts < 1 || c.Workers < 1 {
		bad("need at least one prompt and one worker, got %d and %d", c.Prompts, c.Workers)
	}
	if c.WindowMin < 1 || c.WindowMax < c.WindowMin {
		bad("windows %d-%d: want 1 <= min <= max", c.WindowMin, c.WindowMax)
	}
	if c.StallTimeout <= 0 || c.AckWait <= 0 || c.Timeout <= 0 || c.Speed <= 0 {
		bad("stall timeout, ack wait, timeout and speed must be positive")
	}
	if len(c.KeyRotationsAt) > 0 && c.KeyFileLag <= 0 {
		bad("key rotations need a positive key file lag")
	}
	if c.NATSStop != StopKill && c.NATSStop != StopTerm {
		bad("NATS stop %q: use %q or %q", c.NATSStop, StopKill, StopTerm)
	}
	shares := append([]float64{c.KillFrom, c.KillUntil}, c.AggregatorKillsAt...)
	shares = append(append(shares, c.NATSRestartsAt...), c.ReplaysAt...)
	shares = append(append(shares, c.SecondAggregatorsAt...), c.KeyRotationsAt...)
	for _, at := range shares {
		if at < 0 || at >= 1 {
			bad("progress share %v is outside [0, 1)", at)
		}
	}
	if sum := c.Rate400 + c.Rate429 + c.Rate500 + c.Rate503 + c.HangRate + c.DisconnectRate + c.StreamErrorRate; sum > 1 {
		bad("fault rates add up to %v, more than 1", sum)
	}
	return errors.Join(errs...)
}

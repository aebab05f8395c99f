package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/internal/chaos"
)

// Environment variables that tune a run (all optional):
//
//	AERIE_CHAOS=1               also run TestChaos (5,000 prompts), TestChaosTurns (2,500 conversations) and TestChaosReplay; =0 skips every run
//	AERIE_CHAOS_SEED=N          seed (default: from the clock; printed in the report)
//	AERIE_CHAOS_PROMPTS=N       number of prompts (conversations with turns)
//	AERIE_CHAOS_TURNS=N         most user turns per conversation, every turn generated (--turns all); 1: single-turn prompts
//	AERIE_CHAOS_MAX_ATTEMPTS=N  produce --max-attempts (default: produce's)
//	AERIE_CHAOS_MAX_DELIVER=N   produce --max-deliver (default: produce's)
//	AERIE_CHAOS_KILL_EVERY=4s   mean interval between worker kills (0: none)
//	AERIE_CHAOS_WORKER_KILLS=N  most worker kills (0: no limit)
//	AERIE_CHAOS_AGGREGATOR_KILLS_AT=0.3,0.7  shares of progress at which the aggregator is killed
//	AERIE_CHAOS_AGGREGATOR_KILL_EVERY=0      also kill it at about this interval (stress)
//	AERIE_CHAOS_NATS_RESTARTS_AT=0.5         ... at which the NATS server is stopped and restarted
//	AERIE_CHAOS_REPLAYS_AT=0.4               ... at which `aerie replay` requeues every dead letter
//	AERIE_CHAOS_SECOND_AGGREGATORS_AT=0.45   ... at which a second aggregator is started beside the first
//	AERIE_CHAOS_KEY_ROTATIONS_AT=0.65        ... at which the simulator's API key changes
//	AERIE_CHAOS_REPLAY_AFTER_DONE=1          replay every dead letter once the run is done (0: not)
//	AERIE_CHAOS_FAULTS=400=0.004,429=0.007,500=0.007,503=0.006,hang=0.005,disconnect=0.005,stream-error=0.005
//	                            the simulator's fault rates (kinds not named keep theirs)
//	AERIE_CHAOS_NATS_STOP=kill  how the NATS server is stopped: kill (SIGKILL) or term (SIGTERM)
//	AERIE_CHAOS_NATS_DOWN=2s    how long it stays down
//	AERIE_CHAOS_SPEED=6         simulator time scale
//	AERIE_CHAOS_TIMEOUT=15m     bound on the run after produce
//	AERIE_CHAOS_DIR=DIR         keep the work directory (logs, output, store) under DIR
//	AERIE_CHAOS_KEEP=1          keep the work directory in the system's temp directory
//	AERIE_CHAOS_RACE=1          build the aerie binary with the race detector
//
// The work directory is always kept when the test fails.

// TestChaosShort is the CI run: about 600 prompts, one kill of each kind.
// It runs with `go test ./...`, -short or not, beside TestChaosShortTurns:
// each run spends most of its time waiting for simulated answers, so the
// two together take little longer than one.
func TestChaosShort(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") == "0" {
		t.Skip("AERIE_CHAOS=0")
	}
	t.Parallel()
	runChaos(t, chaos.Short())
}

// TestChaosShortTurns is the CI run of conversations: about 150 of 1 to
// 3 user turns, every turn generated (--turns all), with worker kills in
// the middle of conversations and one kill of each other kind. It runs
// with `go test ./...`, -short or not, beside TestChaosShort.
func TestChaosShortTurns(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") == "0" {
		t.Skip("AERIE_CHAOS=0")
	}
	t.Parallel()
	runChaos(t, chaos.ShortTurns())
}

// TestChaosShortSamples is the CI run of samples in one request: Short
// with 3 samples a prompt, each prompt's samples in one message answered
// with n. Every sample must end once, whatever is killed mid-request.
func TestChaosShortSamples(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") == "0" {
		t.Skip("AERIE_CHAOS=0")
	}
	t.Parallel()
	runChaos(t, chaos.ShortSamples())
}

// TestChaosShortShared is the CI run of two runs on one fleet: Short,
// with a second run of 300 prompts served by the same workers (aerie
// work --runs) whose priority and weight change three times while both
// run. Every prompt of each run must end once.
func TestChaosShortShared(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") == "0" {
		t.Skip("AERIE_CHAOS=0")
	}
	t.Parallel()
	runChaos(t, chaos.ShortShared())
}

// TestChaosShortHiddenStates is the CI run of hidden-state extraction:
// 400 samples, 5% of the server's files bad, one kill of each kind.
// Every sample must end once, its file verified and named by its
// result, and hidden_states/ hold nothing else.
//
// It runs alone, before the parallel runs of this package: a fourth set
// of processes (server, simulator, workers, aggregators) beside theirs
// made their NATS requests miss deadlines on two cores.
func TestChaosShortHiddenStates(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") == "0" {
		t.Skip("AERIE_CHAOS=0")
	}
	runChaos(t, chaos.ShortHiddenStates())
}

// TestChaosHiddenStates is the full run of hidden-state extraction:
// 2,000 samples, 5% bad files, a worker killed every few seconds, two
// aggregator kills and a NATS restart. Opt-in, like TestChaos.
func TestChaosHiddenStates(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") != "1" {
		t.Skip("set AERIE_CHAOS=1 (or run `make chaos`) for the 2,000-sample extraction chaos run")
	}
	if testing.Short() {
		t.Skip("the 2,000-sample extraction chaos run is not short; see TestChaosShortHiddenStates")
	}
	runChaos(t, chaos.LongHiddenStates())
}

// TestChaosShared is the full run of two runs on one fleet: Long with a
// second run of 2,500 prompts whose schedule changes six times. Opt-in,
// like TestChaos.
func TestChaosShared(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") != "1" {
		t.Skip("set AERIE_CHAOS=1 (or run `make chaos`) for the two-run chaos run")
	}
	if testing.Short() {
		t.Skip("the two-run chaos run is not short; see TestChaosShortShared")
	}
	runChaos(t, chaos.LongShared())
}

// TestChaos is the full run: about 5,000 prompts, a worker killed every
// few seconds, two aggregator kills and a NATS restart. Opt-in.
func TestChaos(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") != "1" {
		t.Skip("set AERIE_CHAOS=1 (or run `make chaos`) for the 5,000-prompt chaos run")
	}
	if testing.Short() {
		t.Skip("the 5,000-prompt chaos run is not short; see TestChaosShort")
	}
	runChaos(t, chaos.Long())
}

// TestChaosSamples is the full run of samples in one request: 1,700
// prompts of 3 samples, a worker killed every few seconds, two aggregator
// kills and a NATS restart. Opt-in, like TestChaos.
func TestChaosSamples(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") != "1" {
		t.Skip("set AERIE_CHAOS=1 (or run `make chaos`) for the 5,100-sample chaos run")
	}
	if testing.Short() {
		t.Skip("the 5,100-sample chaos run is not short; see TestChaosShortSamples")
	}
	runChaos(t, chaos.LongSamples())
}

// TestChaosTurns is the full run of conversations: about 2,500 of 1 to 3
// user turns, every turn generated, a worker killed every few seconds,
// two aggregator kills and a NATS restart. Opt-in, like TestChaos.
func TestChaosTurns(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") != "1" {
		t.Skip("set AERIE_CHAOS=1 (or run `make chaos`) for the 2,500-conversation chaos run")
	}
	if testing.Short() {
		t.Skip("the 2,500-conversation chaos run is not short; see TestChaosShortTurns")
	}
	runChaos(t, chaos.LongTurns())
}

// TestChaosReplay puts dead-lettered prompts back to work with `aerie
// replay` during the run, while the aggregator is killed every couple of
// seconds. Opt-in, like TestChaos.
func TestChaosReplay(t *testing.T) {
	if os.Getenv("AERIE_CHAOS") != "1" {
		t.Skip("set AERIE_CHAOS=1 for the replay chaos run")
	}
	runChaos(t, chaos.Replays())
}

func runChaos(t *testing.T, cfg chaos.Config) {
	cfg.Seed = time.Now().UnixNano() % 1_000_000
	applyEnv(t, &cfg)
	cfg.Dir = workDir(t)
	cfg.Bin = buildAerie(t, cfg.Dir)
	// Actions go to stdout as they happen, named by the run (two runs may
	// go side by side): `go test -v` shows them live, plain `go test`
	// only when the test fails.
	cfg.Logf = func(format string, args ...any) { fmt.Printf("%s %s\n", cfg.Run, fmt.Sprintf(format, args...)) }

	h, err := chaos.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)

	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	rep, err := h.Run(ctx)
	fmt.Print(rep)
	if err != nil {
		if errors.Is(err, chaos.ErrStalled) {
			t.Fatalf("stalled: the aggregator did not finish the %d prompts (seed %d); NATS state above, logs in %s",
				cfg.Prompts, cfg.Seed, cfg.Dir)
		}
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	o := rep.Outcome
	if len(o.Duplicates) > 0 || len(o.Missing) > 0 || len(o.InBoth) > 0 {
		t.Errorf("seed %d: %d duplicates, %d in both files, %d missing: every prompt must end in exactly one of completions.jsonl and failed.jsonl, once",
			cfg.Seed, len(o.Duplicates), len(o.InBoth), len(o.Missing))
	}
	if cfg.Shared != "" {
		switch so := rep.SharedOutcome; {
		case so == nil:
			t.Errorf("seed %d: run %s was not checked", cfg.Seed, cfg.Shared)
		case len(so.Duplicates) > 0 || len(so.Missing) > 0 || len(so.InBoth) > 0 || len(so.Unknown) > 0 || len(so.Unparseable) > 0:
			t.Errorf("seed %d: run %s: %d duplicates, %d in both files, %d missing, %d unknown, %d unparseable: every prompt must end once",
				cfg.Seed, cfg.Shared, len(so.Duplicates), len(so.InBoth), len(so.Missing), len(so.Unknown), len(so.Unparseable))
		}
		if rep.Kills.ScheduleChanges != len(cfg.ScheduleChangesAt) {
			t.Errorf("seed %d: %d schedule changes made, want %d", cfg.Seed, rep.Kills.ScheduleChanges, len(cfg.ScheduleChangesAt))
		}
	}
	if len(o.Unparseable) > 0 || len(o.Unknown) > 0 {
		t.Errorf("seed %d: %d unparseable lines, %d ids not in the input", cfg.Seed, len(o.Unparseable), len(o.Unknown))
	}
	if len(o.AnsweredNotWritten) > 0 {
		t.Errorf("seed %d: %d prompts have a stored answer that is not in completions.jsonl", cfg.Seed, len(o.AnsweredNotWritten))
	}
	if len(o.BadTurns) > 0 {
		t.Errorf("seed %d: %d lines have turns that are not their conversation's (see the report)", cfg.Seed, len(o.BadTurns))
	}
	if len(o.LeftoverTurns) > 0 {
		t.Errorf("seed %d: %d completed conversations left their stored turns in AERIE_TURNS", cfg.Seed, len(o.LeftoverTurns))
	}
	if q := rep.Requests; q == nil {
		t.Errorf("seed %d: the requests sent for stored turns were not checked (see the log)", cfg.Seed)
	} else if len(q.Regenerated) > 0 {
		t.Errorf("seed %d: %d requests asked for a turn already stored or a prompt already answered", cfg.Seed, len(q.Regenerated))
	}
	if cfg.HiddenStates {
		switch hs := rep.HiddenStates; {
		case hs == nil:
			t.Errorf("seed %d: the hidden-states output was not checked (see the log)", cfg.Seed)
		case !hs.OK():
			t.Errorf("seed %d: the hidden-states output is not whole: %s", cfg.Seed, hs)
		}
	}
	if rep.Kills.Refused != rep.Kills.SecondAggregators {
		t.Errorf("seed %d: %d second aggregators started, %d gave up", cfg.Seed, rep.Kills.SecondAggregators, rep.Kills.Refused)
	}
	if len(o.Unreplayable) > 0 {
		t.Errorf("seed %d: %d prompts in failed.jsonl have no dead letter (nor a result): `aerie replay` cannot reach them", cfg.Seed, len(o.Unreplayable))
	}
	if len(rep.Races) > 0 {
		t.Errorf("seed %d: data races reported in %v", cfg.Seed, rep.Races)
	}
	if len(rep.Unexpected) > 0 {
		t.Errorf("seed %d: %d processes exited on their own (see the report)", cfg.Seed, len(rep.Unexpected))
	}
	if t.Failed() {
		t.Logf("work dir kept: %s", cfg.Dir)
	}
}

// workDir is a fresh directory for the run, removed at the end unless the
// test failed or AERIE_CHAOS_DIR / AERIE_CHAOS_KEEP ask to keep it.
func workDir(t *testing.T) string {
	t.Helper()
	parent, keep := os.Getenv("AERIE_CHAOS_DIR"), os.Getenv("AERIE_CHAOS_KEEP") == "1"
	if parent != "" {
		keep = true
		if err := os.MkdirAll(parent, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp(parent, "aerie-"+t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if keep || t.Failed() {
			t.Logf("work dir: %s", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove work dir: %v", err)
		}
	})
	return dir
}

func buildAerie(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "aerie")
	args := []string{"build", "-o", bin}
	if os.Getenv("AERIE_CHAOS_RACE") == "1" {
		args = append(args, "-race")
	}
	args = append(args, "github.com/aerie-dev/aerie/cmd/aerie")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return bin
}

func applyEnv(t *testing.T, c *chaos.Config) {
	t.Helper()
	env := func(key string, set func(string) error) {
		if v := os.Getenv(key); v != "" {
			if err := set(v); err != nil {
				t.Fatalf("%s=%q: %v", key, v, err)
			}
		}
	}
	duration := func(d *time.Duration) func(string) error {
		return func(s string) (err error) { *d, err = time.ParseDuration(s); return err }
	}
	env("AERIE_CHAOS_SEED", func(s string) (err error) { c.Seed, err = strconv.ParseInt(s, 10, 64); return err })
	env("AERIE_CHAOS_PROMPTS", func(s string) (err error) { c.Prompts, err = strconv.Atoi(s); return err })
	env("AERIE_CHAOS_TURNS", func(s string) (err error) { c.Turns, err = strconv.Atoi(s); return err })
	env("AERIE_CHAOS_SPEED", func(s string) (err error) { c.Speed, err = strconv.ParseFloat(s, 64); return err })
	env("AERIE_CHAOS_MAX_ATTEMPTS", func(s string) (err error) { c.MaxAttempts, err = strconv.Atoi(s); return err })
	env("AERIE_CHAOS_MAX_DELIVER", func(s string) (err error) { c.MaxDeliver, err = strconv.Atoi(s); return err })
	env("AERIE_CHAOS_WORKER_KILLS", func(s string) (err error) { c.WorkerKills, err = strconv.Atoi(s); return err })
	env("AERIE_CHAOS_NATS_STOP", func(s string) error { c.NATSStop = s; return nil })
	env("AERIE_CHAOS_AGGREGATOR_KILLS_AT", shares(&c.AggregatorKillsAt))
	env("AERIE_CHAOS_NATS_RESTARTS_AT", shares(&c.NATSRestartsAt))
	env("AERIE_CHAOS_REPLAYS_AT", shares(&c.ReplaysAt))
	env("AERIE_CHAOS_SECOND_AGGREGATORS_AT", shares(&c.SecondAggregatorsAt))
	env("AERIE_CHAOS_KEY_ROTATIONS_AT", shares(&c.KeyRotationsAt))
	env("AERIE_CHAOS_REPLAY_AFTER_DONE", func(s string) (err error) { c.ReplayAfterDone, err = strconv.ParseBool(s); return err })
	env("AERIE_CHAOS_FAULTS", func(s string) error { return faults(c, s) })
	env("AERIE_CHAOS_KILL_EVERY", duration(&c.WorkerKillEvery))
	env("AERIE_CHAOS_AGGREGATOR_KILL_EVERY", duration(&c.AggregatorKillEvery))
	env("AERIE_CHAOS_NATS_DOWN", duration(&c.NATSDown))
	env("AERIE_CHAOS_TIMEOUT", duration(&c.Timeout))
}

// shares parses a comma-separated list of progress shares ("" is none).
func shares(dst *[]float64) func(string) error {
	return func(s string) error {
		*dst = nil
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return err
			}
			*dst = append(*dst, v)
		}
		return nil
	}
}

// faults parses KIND=RATE,... into the simulator's fault rates.
func faults(c *chaos.Config, s string) error {
	rates := map[string]*float64{"400": &c.Rate400, "429": &c.Rate429, "500": &c.Rate500, "503": &c.Rate503,
		"hang": &c.HangRate, "disconnect": &c.DisconnectRate, "stream-error": &c.StreamErrorRate}
	for _, item := range strings.Split(s, ",") {
		kind, rate, ok := strings.Cut(strings.TrimSpace(item), "=")
		dst := rates[kind]
		if !ok || dst == nil {
			return fmt.Errorf("%q: want KIND=RATE with KIND one of 400, 429, 500, 503, hang, disconnect, stream-error", item)
		}
		v, err := strconv.ParseFloat(rate, 64)
		if err != nil {
			return fmt.Errorf("%q: %w", item, err)
		}
		*dst = v
	}
	return nil
}

// Package chaos runs aerie the way it runs in production, as separate
// processes (a NATS server, the vLLM simulator, a producer, several
// workers and one aggregator), injects backend faults, kills processes
// with SIGKILL while they work, and then checks aerie's promise: every
// prompt ends in exactly one of completions.jsonl and failed.jsonl, never
// twice, never missing.
//
// With Config.HiddenStates the run extracts hidden states: the samples
// are rows of token ids, the simulator writes one file per request and
// spoils a share of them (missing, cut, a NaN, other token ids), and
// the check also reads the output as the trainer will (hscheck): one
// verified file per sample, named by its result with its checksum, the
// dataset's rows in idx order, nothing else in hidden_states/.
//
// With Config.Turns above 1 the prompts are conversations generated with
// --turns all, every assistant turn in order, each stored before the
// next; the check then also reads every line turn by turn against its
// input conversation, and looks for stored turns that completed
// conversations left behind. In every run the workers reach the
// simulator through a proxy of the harness that records each request,
// so that a request for a turn already stored, or a prompt already
// answered, is found (see RequestCheck).
//
// A Harness does one run. Its Config says how many prompts, which faults
// the simulator injects and what to break: a worker every few seconds
// (each replaced by a new one with a new name), the aggregator at given
// shares of progress, and the NATS server (SIGKILL or SIGTERM, then a
// restart on the same port and store). Progress is read from the
// aggregator's output files, so the schedule adapts to the speed of the
// machine. The Report says what was done and what came out.
//
// A ClusterHarness does a run against a three-node cluster of `aerie
// server` processes instead (authenticated routes, role credentials, R3
// streams), two workers and the aggregator, each in a network namespace
// of its own joined by a private bridge when the machine allows it
// (loopback otherwise): it kills the leader of AERIE_PROMPTS, cuts a
// worker's host off the network for longer than AckWait, and rebuilds a
// node from an empty store, and measures how long each recovery takes
// (ClusterReport; figures in docs/cluster.md).
//
// The tests of this package are the suite: TestChaosShort (about 600
// prompts, one kill of each kind), TestChaosShortTurns (about 150
// conversations) and TestChaosShortSamples (250 prompts of 3 samples,
// each prompt's samples in one request) and TestChaosShortHiddenStates
// (400 samples) run with `go test ./...`; TestChaos (about 5,000
// prompts, a worker killed every few seconds), TestChaosTurns (about
// 2,500 conversations), TestChaosSamples (1,700 prompts of 3
// samples) and TestChaosHiddenStates (2,000 samples) only with
// AERIE_CHAOS=1; TestClusterShort (600
// prompts) always, TestCluster (3,000) only with AERIE_CHAOS=1. See
// `make chaos` and `make chaos-short`, and chaos_test.go and
// cluster_test.go for the environment variables that tune a run.
package chaos

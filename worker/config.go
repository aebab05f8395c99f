package worker

import (
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

// Defaults for Config.
const (
	// DefaultWindow matches the client concurrency that keeps a vLLM server
	// with max-num-seqs 256 busy without a deep queue in front of it.
	DefaultWindow = 200
	// DefaultGrace is how long a stopping worker lets in-flight prompts
	// finish before handing them back.
	DefaultGrace = 30 * time.Second
	// DefaultHeartbeat is the heartbeat period.
	DefaultHeartbeat = 2 * time.Second
	// DefaultPullWait bounds one pull request; it is also the longest a
	// stopping worker waits for an open pull to end.
	DefaultPullWait = 2 * time.Second
	// DefaultRetryBase and DefaultRetryMax bound the delay before a prompt
	// that failed transiently is delivered again: base x 2^(attempt-1),
	// capped, with ±50% jitter so that a burst of failures does not come
	// back as a burst.
	DefaultRetryBase = 5 * time.Second
	DefaultRetryMax  = 5 * time.Minute
	// DefaultOutageRetry is the delay of a prompt handed back while this
	// worker's backend is down: long enough not to spin through the
	// workers of a backend that is down for everyone, short enough that a
	// healthy worker elsewhere takes it soon.
	DefaultOutageRetry = 5 * time.Second
	// DefaultWindowPoll is how often --window auto reads the backend's
	// metrics: vLLM's gauges move within a second, and a reading costs
	// the server little.
	DefaultWindowPoll = time.Second
	// DefaultServingTTFTSLO and DefaultBatchPriority are the defaults of
	// YieldToServing: a second to first token is what interactive users
	// of a chat notice; 10 leaves room below and above for other kinds.
	DefaultServingTTFTSLO = time.Second
	DefaultBatchPriority  = 10
	// DefaultMaxWindow bounds --window auto (see policy.DefaultMaxWindow).
	DefaultMaxWindow = policy.DefaultMaxWindow
	// DefaultHandBackAfter is the least time a request must have waited
	// without a first token before it is handed back at the end of a run
	// (see Config.HandBackAfter).
	DefaultHandBackAfter = 5 * time.Second
)

// Config configures a worker. Zero fields take the defaults above.
type Config struct {
	// Run is the run to work on, or Runs the runs, or AllRuns every run;
	// exactly one is required. With Run the worker waits for the run's
	// manifest and refuses a backend that does not serve its model. With
	// Runs or AllRuns it serves each run as its manifest appears in the
	// runs bucket, runs produced after it started included (AllRuns: every
	// one), and skips, saying so in a heartbeat, a run whose model its
	// backend does not serve. Free slots are shared between the runs by
	// their schedules (schema.Schedule).
	Run     string
	Runs    []string
	AllRuns bool
	// ExitWhenDone stops the worker once its run (Run alone) is done: its
	// aggregator has written every unit's outcome and nothing is left to
	// deliver (done.go). The worker then stops as on a cancelled
	// context. False keeps it waiting for replays and new runs.
	ExitWhenDone bool
	// Name identifies the worker in heartbeats and results. Empty means
	// "<host>-<random>", unique per process, so that a restarted worker
	// starts a new heartbeat series.
	Name string
	// Window is the exact maximum number of requests this worker has
	// at its backend at once. With --turns last it is also the exact
	// maximum number of prompts delivered to it and not yet acknowledged.
	// With --turns all a conversation gives its slot back while it stores
	// a finished turn and takes one again, before any new prompt, for the
	// next; it keeps its prompt meanwhile, so up to twice Window prompts
	// may be held. With AutoWindow it is the window the worker starts
	// with, and keeps when the backend serves no metrics.
	Window int
	// AutoWindow sizes the window from the backend's own load, read from
	// its Prometheus metrics every WindowPoll (see policy.WindowRule): it grows
	// while the server has free slots and shrinks when requests wait in
	// it or its KV cache preempts, between 1 and MaxWindow, exact at
	// every moment. False keeps Window fixed.
	AutoWindow bool
	// MaxWindow bounds an automatic window; zero means DefaultMaxWindow.
	MaxWindow int
	// Refuse, when set, says why the backend's engine cannot serve a
	// run (engine.Found.Plan), or nil when it can: a worker of that one
	// run (Run) stops with the reason before it takes a prompt; a worker
	// of several skips the run and says why in its heartbeats. Nil
	// serves every run.
	Refuse func(*schema.Manifest) error
	// LoadMetrics names the series an automatic window reads, those of
	// the backend's engine (engine.Profile.Load; its Path is the
	// client's Dialect.MetricsPath). The zero value means vLLM's.
	LoadMetrics engine.LoadMetrics
	// WindowPoll is how often an automatic window reads the backend's
	// metrics; zero means DefaultWindowPoll. A sped-up simulator needs it
	// shorter by its speed.
	WindowPoll time.Duration
	// Speed is how many times as fast as wall time the backend's time
	// runs: that of aerie run's built-in simulator at --sim-speed. The
	// defaults of WindowPoll and HandBackAfter are that many times
	// shorter, down to 10 ms, so that the worker reads the backend's
	// load and hands back the tail as often, in the backend's time, as
	// against a real server. Zero, or 1 or less, is wall time.
	Speed float64
	// YieldToServing shares the backend with interactive requests (see
	// policy.YieldPolicy): every request carries vLLM's priority BatchPriority, and
	// the window is capped while requests that are not the worker's wait
	// in the server or its TTFT p95 over the last minute is above
	// ServingTTFTSLO. The backend must run --scheduling-policy priority.
	YieldToServing bool
	// ServingTTFTSLO is the interactive requests' time to first token
	// (p95) that YieldToServing holds; zero means DefaultServingTTFTSLO.
	ServingTTFTSLO time.Duration
	// BatchPriority is the priority of the worker's requests with
	// YieldToServing (vLLM: lower goes first; interactive requests have
	// 0); zero means DefaultBatchPriority.
	BatchPriority int
	// HandBackAfter is how long, at least, a request must have waited
	// without a first token before it is handed back at the end of a run:
	// when the stream has nothing left to deliver and another worker of
	// the run has free slots, such prompts are cancelled here and handed
	// back at once for it (see policy.HandBackWait). The wait is also at least three
	// times the backend's shortest time to first token. Zero means
	// DefaultHandBackAfter; negative never hands back.
	HandBackAfter time.Duration
	// HedgeOff turns hedging off. By default, once the run has nothing
	// left to deliver, a worker with free slots sends a second copy of a
	// request that a much slower worker of the run has run for longer
	// than this one expects to take for the whole answer; the first
	// answer stored is kept and the other copy cancelled (see hedger).
	HedgeOff bool
	// HedgeMax bounds the hedges a worker runs at once; zero means as
	// many as its window has free slots.
	HedgeMax int
	// Grace is how long in-flight prompts may take to finish once the
	// worker is asked to stop; the rest are handed back (NAK).
	Grace time.Duration
	// Heartbeat is the heartbeat period.
	Heartbeat time.Duration
	// PullWait bounds one pull request.
	PullWait time.Duration
	// RetryBase and RetryMax shape the delay of a transient retry.
	RetryBase, RetryMax time.Duration
	// OutageRetry is the delay of a prompt handed back during an outage.
	OutageRetry time.Duration
	// BreakerThreshold is the number of consecutive backend failures that
	// stops pulling until /health answers again; zero means
	// DefaultBreakerThreshold.
	BreakerThreshold int
	// Provision is used if the run's consumer does not exist yet.
	Provision provision.Options
	// Metrics, if set, is where the worker registers its Prometheus
	// metrics (aerie_worker_*, labelled with its name and run); nil
	// means none are kept.
	Metrics prometheus.Registerer
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// DataDir is where a hidden-states run's output goes, as
	// <DataDir>/<run>, unless its manifest names a directory; it must be
	// a disk the worker's server writes to, or one on which a file can be
	// copied. Empty means DefaultDataDir.
	DataDir string
	// Out, when set, is where the hidden-states run of Run goes on this
	// host, over the directory it was produced with or <DataDir>/<run>:
	// for a shared disk mounted at another path here. Only with Run.
	Out string
	// LockWait is how long, after the server's reply, a sample's file may
	// stay locked by the server before the attempt is failed; zero means
	// DefaultLockWait.
	LockWait time.Duration
	// DiskFree says how many bytes are free for an unprivileged writer on
	// the file system of a directory; nil means the file system's own
	// figure (statfs). Tests give their own.
	DiskFree func(dir string) (int64, error)
	// DiskReserve is the room a worker keeps free on those disks beyond
	// the next sample's file; zero means DefaultDiskReserve.
	DiskReserve int64
}

// DefaultDiskReserve is Config.DiskReserve's default: a disk filled to
// its last byte breaks every other writer on it (the server's logs, the
// NATS store).
const DefaultDiskReserve = 1 << 30

// DefaultDataDir is Config.DataDir's default: the aggregator's.
const DefaultDataDir = "/data"

func (c Config) withDefaults() Config {
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = schema.SafeToken(host) + "-" + uuid.NewString()[:8]
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.PullWait == 0 {
		c.PullWait = DefaultPullWait
	}
	if c.RetryBase == 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.OutageRetry == 0 {
		c.OutageRetry = DefaultOutageRetry
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = DefaultMaxWindow
	}
	if c.AutoWindow {
		c.Window = min(c.Window, c.MaxWindow)
	}
	if c.WindowPoll == 0 {
		c.WindowPoll = c.inBackendTime(DefaultWindowPoll)
	}
	if c.ServingTTFTSLO == 0 {
		c.ServingTTFTSLO = DefaultServingTTFTSLO
	}
	if c.BatchPriority == 0 {
		c.BatchPriority = DefaultBatchPriority
	}
	if c.HandBackAfter == 0 {
		c.HandBackAfter = c.inBackendTime(DefaultHandBackAfter)
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = DefaultBreakerThreshold
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.LockWait == 0 {
		c.LockWait = DefaultLockWait
	}
	if c.DiskFree == nil {
		c.DiskFree = diskFree
	}
	if c.DiskReserve == 0 {
		c.DiskReserve = DefaultDiskReserve
	}
	return c
}

// inBackendTime is d of the backend's time in wall time (see Speed).
func (c Config) inBackendTime(d time.Duration) time.Duration {
	if c.Speed <= 1 {
		return d
	}
	return max(time.Duration(float64(d)/c.Speed), 10*time.Millisecond)
}

// policy is what the pull decision depends on of c, whose defaults are
// filled in.
func (c Config) policy() policy.Config {
	return policy.Config{Auto: c.AutoWindow, Window: c.Window, MaxWindow: c.MaxWindow,
		HandBackAfter: c.HandBackAfter, AckEvery: ackRoomPeriods * c.Heartbeat,
		Yield: c.YieldToServing, TTFTSLO: c.ServingTTFTSLO,
		Hedge: !c.HedgeOff, HedgeMax: c.HedgeMax, PeekEvery: hintlessPeekEvery * c.WindowPoll}
}

// ackRoomPeriods is how many heartbeat periods apart the run's consumer
// is looked at for room (see policy.Reads): the look costs one
// JetStream API request.
const ackRoomPeriods = 5

// hintlessPeekEvery is how many decisions apart a slow worker reads the
// hints left in a run's queue once a reading found none: a run without
// hints costs it a few reads a minute, not a few a decision.
const hintlessPeekEvery = 30

// RequestPriority is the priority, in vLLM's sense, every request of a
// worker of c carries: BatchPriority (zero: DefaultBatchPriority) when
// it yields to serving traffic, 0 (none) otherwise.
func (c Config) RequestPriority() int {
	if !c.YieldToServing {
		return 0
	}
	if c.BatchPriority == 0 {
		return DefaultBatchPriority
	}
	return c.BatchPriority
}

// workerLogger is cfg's logger with the worker's name, and the run's
// when it serves one run.
func workerLogger(cfg Config) *slog.Logger {
	if cfg.Run != "" {
		return cfg.Logger.With("worker", cfg.Name, "run", cfg.Run)
	}
	return cfg.Logger.With("worker", cfg.Name)
}

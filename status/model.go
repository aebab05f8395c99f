package status

import (
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// Run is the state of one run. Its JSON field names are stable: scripts
// may rely on them (docs/watching.md lists them). Counts come from the
// aggregator's last throughput event, worker lines from the heartbeats,
// Queue from the consumers.
type Run struct {
	Run       string    `json:"run"`
	Model     string    `json:"model"`
	Total     int       `json:"total"`
	CreatedAt time.Time `json:"created_at"`
	Producer  string    `json:"producer"`
	// Priority, Weight and Paused are the run's schedule (aerie runs
	// set): how it shares workers that serve several runs.
	Priority int     `json:"priority"`
	Weight   float64 `json:"weight"`
	Paused   bool    `json:"paused"`
	// Needs are the features a worker, aggregator or export must have to
	// handle the run (schema.Manifest.Needs), and WrittenBy the aerie
	// version that produced it, one that has them.
	Needs     []string `json:"needs,omitempty"`
	WrittenBy string   `json:"written_by,omitempty"`

	// Phase is the last throughput event's phase; empty when there is no
	// event (Event is nil).
	Phase     schema.Phase `json:"phase"`
	Completed int          `json:"completed"`
	Failed    int          `json:"failed"`
	// FailedByReason counts the failures by reason class (schema.Reason*);
	// empty, never null, when nothing failed or the aggregator is older
	// than the count.
	FailedByReason map[string]int `json:"failed_by_reason"`
	Truncated      int            `json:"truncated"`
	// HintedAnswers and HintRankCorrelation say how well the prompts'
	// length hints ranked the answers (schema.Throughput's fields).
	HintedAnswers       int     `json:"hinted_answers,omitempty"`
	HintRankCorrelation float64 `json:"hint_rank_correlation,omitempty"`
	// InFlight counts the prompts delivered to workers and not yet
	// acknowledged (the workers' consumer): being generated, or waiting
	// for a retry. Without that consumer, the requests the live workers
	// have at their backends.
	InFlight    int `json:"in_flight"`
	LiveWorkers int `json:"live_workers"`
	// Rates over the aggregator's last minute, and over its whole life.
	RequestsPerSec        float64 `json:"requests_per_sec"`
	TokensPerSec          float64 `json:"tokens_per_sec"`
	RequestsPerSecOverall float64 `json:"requests_per_sec_overall"`
	TokensPerSecOverall   float64 `json:"tokens_per_sec_overall"`
	// Task is the run's task kind other than chat; for a hidden-states
	// run the token rates are input tokens extracted, and
	// HiddenStatesBytes of HiddenStatesBytesTotal the files written, at
	// HiddenStatesBytesPerSec (the event's).
	Task                    string  `json:"task,omitempty"`
	HiddenStatesBytes       int64   `json:"hidden_states_bytes,omitempty"`
	HiddenStatesBytesTotal  int64   `json:"hidden_states_bytes_total,omitempty"`
	HiddenStatesBytesPerSec float64 `json:"hidden_states_bytes_per_sec,omitempty"`
	// ETASec is the estimated time to the end in seconds, ETALowSec and
	// ETAHighSec the band the end lies in four times out of five; all
	// negative when unknown (no event, or too early to tell; the band
	// alone when the aggregator does not send one).
	ETASec     float64 `json:"eta_sec"`
	ETALowSec  float64 `json:"eta_low_sec"`
	ETAHighSec float64 `json:"eta_high_sec"`
	// Stragglers is set when the run's longest answers, not its bulk, set
	// the ETA: what it waits on (the event's).
	Stragglers *schema.Stragglers `json:"stragglers,omitempty"`
	ElapsedSec float64            `json:"elapsed_sec"`
	// WriteError is why the aggregator cannot write its output, if it
	// said so in its last event.
	WriteError string `json:"write_error,omitempty"`
	// Unwritten counts the lines the run lacks that nothing will bring,
	// if the aggregator said so in its last event (see
	// schema.Throughput.Unwritten).
	Unwritten int `json:"unwritten,omitempty"`
	// AggregatorVersion is the aerie version of the aggregator that sent
	// the last event; AggregatorLacks, set when it writes nothing of the
	// run for want of them, the features it lacks, which aerie
	// AggregatorLacksWrittenBy has (see schema.Throughput).
	AggregatorVersion        string   `json:"aggregator_version,omitempty"`
	AggregatorLacks          []string `json:"aggregator_lacks,omitempty"`
	AggregatorLacksWrittenBy string   `json:"aggregator_lacks_written_by,omitempty"`
	// Event is the last throughput event's time; nil when the events
	// stream holds none for the run (no aggregator ran, or its events
	// expired).
	Event *Age `json:"event"`

	Queue Queue `json:"queue"`
	// Aggregator is who holds the run's aggregator lease; nil when no
	// aggregator is running.
	Aggregator *Aggregator `json:"aggregator"`
	// Workers are the workers heard from, live ones first, then stale
	// ones, most recent first; never null.
	Workers []Worker `json:"workers"`
	// WorkersNotShown counts stale workers left out past Options.MaxWorkers.
	WorkersNotShown int `json:"workers_not_shown"`
	// Stranded is what workers that went silent without stopping held;
	// nil when none did, or once the AckWait has given it all back.
	Stranded *Stranded `json:"stranded"`
	// TokensPerSecFrom says where TokensPerSec comes from: "event" (the
	// aggregator's last throughput event) or "heartbeats" (the live
	// workers' own rates, summed, when the event has none to give: too
	// sparse, stale or not there yet).
	TokensPerSecFrom string `json:"tokens_per_sec_from"`

	ackWait time.Duration // the workers consumer's; 0 when unknown
}

// Stranded is what workers that went silent held: JetStream gives the
// prompts back to the queue once the AckWait has passed since the
// worker's last progress ack, which came no later than its last
// heartbeat.
type Stranded struct {
	// Prompts is what those workers' last heartbeats said they held (at
	// most the prompts delivered and not acknowledged).
	Prompts int `json:"prompts"`
	// Workers names them.
	Workers []string `json:"workers"`
	// BackInSec is the time until the last of them are back in the queue:
	// the AckWait after the last heartbeat of the worker heard last.
	BackInSec  float64 `json:"back_in_sec"`
	AckWaitSec float64 `json:"ack_wait_sec"`
}

// Age is when something happened, by the server's clock, and how long
// before the status was gathered.
type Age struct {
	At     time.Time `json:"at"`
	AgeSec float64   `json:"age_sec"`
	// Stale is set when it is older than it should be if its sender were
	// running: a worker sends a heartbeat every 2 s, an aggregator an
	// event every 5 s.
	Stale bool `json:"stale"`
}

// Queue is the state of the run's consumers.
type Queue struct {
	// Pending counts prompts not yet delivered to any worker.
	Pending uint64 `json:"pending"`
	// AckPending counts prompts delivered and not yet acknowledged: being
	// generated, or waiting for a retry after a transient failure.
	AckPending int `json:"ack_pending"`
	// Redelivered counts prompts delivered more than once and not yet
	// acknowledged.
	Redelivered int `json:"redelivered"`
	// ResultsToWrite and FailuresToWrite count results and dead letters
	// stored and not yet written by the aggregator.
	ResultsToWrite  uint64 `json:"results_to_write"`
	FailuresToWrite uint64 `json:"failures_to_write"`
	// Missing names the consumers that do not exist (yet).
	Missing []string `json:"missing,omitempty"`
}

// Aggregator is the holder of a run's aggregator lease.
type Aggregator struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Dir is where it writes the run's files, on Host.
	Dir string `json:"dir"`
}

// Worker is what a worker's latest heartbeat says.
type Worker struct {
	Name string `json:"name"`
	// Version is the worker's aerie version; empty for a worker older
	// than feature checks, which serves runs of manifest version 1 only.
	Version string `json:"version,omitempty"`
	// Lacks, when set, are the features of the run the worker lacks, so
	// that it leaves the run alone; LacksWrittenBy is the aerie version
	// that has them.
	Lacks          []string `json:"lacks,omitempty"`
	LacksWrittenBy string   `json:"lacks_written_by,omitempty"`
	// Host and Backend are empty for a worker older than those fields.
	Host    string `json:"host"`
	Backend string `json:"backend"`
	Window  int    `json:"window"`
	// InFlight counts the requests the worker has at its backend for
	// this run (its heartbeat's in_flight_tokens); over Window, the run's
	// share of the worker.
	InFlight int `json:"in_flight"`
	// Held is the heartbeat's in_flight: the prompts the worker holds,
	// which also counts the slots it has reserved for a pull that is
	// waiting for prompts.
	Held int `json:"held"`
	// TokensPerSec is measured between the worker's first and last
	// heartbeats of the rate window; negative when unknown (fewer than
	// two heartbeats in it).
	TokensPerSec   float64 `json:"tokens_per_sec"`
	TokensStreamed int64   `json:"tokens_streamed"`
	Completed      int64   `json:"completed"`
	DeadLettered   int64   `json:"dead_lettered"`
	Retried        int64   `json:"retried"`
	// Hedges counts the hedges the worker sent at the end of the run,
	// HedgesWon those whose answer it stored first.
	Hedges    int64 `json:"hedges,omitempty"`
	HedgesWon int64 `json:"hedges_won,omitempty"`
	// Paused says why the worker had stopped pulling; empty when it had
	// not. Holding says, when it had not, why it held back from the
	// run's prompts: near the end of the run for faster workers
	// (HoldingTail), or from length hints too long for its server
	// (HoldingHints); empty while it pulled them.
	Paused    string `json:"paused,omitempty"`
	Holding   string `json:"holding,omitempty"`
	Heartbeat Age    `json:"heartbeat"`
	// BackInSec is, for a worker gone silent without stopping, the time
	// until the prompts it held are back in the queue; -1 otherwise.
	BackInSec float64 `json:"back_in_sec"`
}

// Why a worker holds back from a run's prompts (Worker.Holding).
const (
	HoldingTail  = "near the end of the run, the other workers finish the prompts left sooner"
	HoldingHints = "the prompts next in the queue have length hints too long for its server"
)

// Line is one run in the list of every run.
type Line struct {
	Run   string `json:"run"`
	Model string `json:"model"`
	Total int    `json:"total"`
	// Phase, Completed, Failed and the ETA are the last throughput
	// event's; Phase is empty and the ETA negative without one.
	Phase      schema.Phase `json:"phase"`
	Completed  int          `json:"completed"`
	Failed     int          `json:"failed"`
	ETASec     float64      `json:"eta_sec"`
	ETALowSec  float64      `json:"eta_low_sec"`
	ETAHighSec float64      `json:"eta_high_sec"`
	Event      *Age         `json:"event"`
	// Problem says why the run's manifest cannot be read.
	Problem string `json:"problem,omitempty"`
}

package schema

import "time"

// Events are JSON, not msgpack, so that `nats sub 'aerie.events.>'` prints
// something a person can read. They travel on core NATS subjects and are
// captured by the EventsStream for late readers.

// Phase names where a run is in its life, as reported by throughput events.
type Phase string

const (
	// PhaseWaiting: no prompt has been delivered to a worker yet.
	PhaseWaiting Phase = "waiting"
	// PhaseRampUp: workers are filling their windows and the first
	// completions are the short ones, so completion counts understate the
	// real rate; the ETA comes from streamed tokens.
	PhaseRampUp Phase = "ramp-up"
	// PhaseSteady: completions arrive at the rate the backends sustain.
	PhaseSteady Phase = "steady"
	// PhaseDraining: every prompt has been handed out; the batch empties and
	// the slowest answers finish.
	PhaseDraining Phase = "draining"
	// PhaseDone: every prompt is either completed or failed.
	PhaseDone Phase = "done"
)

// Heartbeat is what a worker publishes every few seconds on
// HeartbeatSubject. Counters are cumulative for the life of the worker
// process, so a lost heartbeat loses no information.
type Heartbeat struct {
	Run    string    `json:"run"`
	Worker string    `json:"worker"`
	Time   time.Time `json:"time"`
	// Host is the host name of the machine the worker runs on, so that
	// `aerie status` tells which GPU server a line is about. Empty from a
	// worker older than the field.
	Host string `json:"host,omitempty"`
	// Backend is the URL of the worker's backend without credentials
	// (no user info, no query): where its prompts go. Empty from a worker
	// older than the field.
	Backend string `json:"backend,omitempty"`
	// Window is the most requests the worker has generating at once.
	Window int `json:"window"`
	// InFlight is the number of prompts delivered to this worker and not yet
	// acknowledged: those generating, and up to as many again whose
	// results are being stored (so it may exceed Window).
	InFlight int `json:"in_flight"`
	// FreeSlots is the worker's window slots with no request generating,
	// for whichever run it serves: a worker of several runs shares its
	// window between them, so Window less this run's requests overstates
	// them. Nil from a worker older than the field, which serves one run.
	FreeSlots *int `json:"free_slots,omitempty"`
	// OtherRuns is the number of prompts the worker holds for runs other
	// than this one. Zero for a worker that serves one run. The ETA counts
	// only Window less OtherRuns as this run's batch. The other runs'
	// requests still share the server's decode steps with it, so they
	// slow its drain.
	OtherRuns int `json:"other_runs,omitempty"`
	// InFlightTokens holds, for each request being generated, the number of
	// completion tokens streamed so far. Requests still waiting for their
	// first token are reported as 0.
	InFlightTokens []int `json:"in_flight_tokens,omitempty"`
	// InFlightMillis holds, for each request of InFlightTokens in the
	// same order, the milliseconds since it was sent: with its tokens, its
	// own speed, which tells how long a long answer still has to run.
	// Empty from a worker older than the field.
	InFlightMillis []int64 `json:"in_flight_ms,omitempty"`
	// TokensStreamed counts every completion token received from the
	// backend, including those of requests that later failed.
	TokensStreamed int64 `json:"tokens_streamed"`
	// Completed counts results published and acknowledged.
	Completed int64 `json:"completed"`
	// DeadLettered counts prompts sent to the dead-letter stream.
	DeadLettered int64 `json:"dead_lettered"`
	// Retried counts transient failures handed back for a later attempt.
	Retried int64 `json:"retried"`
	// InterimTurns is, with --turns all, how many turns are finished and
	// stored of the conversations this worker holds and has not finished:
	// a gauge, not a counter, so that a lost heartbeat or a dead worker
	// never makes the aggregator count a turn twice.
	InterimTurns int `json:"interim_turns,omitempty"`
	// Paused is set, with PausedReason, while the worker has stopped
	// pulling: its backend is down, or it is shutting down
	// (PausedStopping).
	Paused       bool   `json:"paused,omitempty"`
	PausedReason string `json:"paused_reason,omitempty"`
	// TailHold is set while the worker takes no new prompt because, near
	// the end of the run, the other workers would finish the prompts left
	// sooner than it would (it keeps those it holds). Other workers do
	// not count on it to pull.
	TailHold bool `json:"tail_hold,omitempty"`
	// HintHold is set while the worker takes no new prompt because the
	// prompts next in the run's queue have length hints too long for its
	// server, which is much slower than the run's other workers (see
	// HintError); it keeps those it holds. Other workers do not count on
	// it to pull. A worker older than the field holds so unannounced.
	HintHold bool `json:"hint_hold,omitempty"`
	// ConsumerFull is set from when the worker, with free slots, finds
	// the run's consumer holding as many unsettled prompts as its
	// MaxAckPending while prompts wait, until it sees room again: no
	// worker gets more meanwhile.
	ConsumerFull bool `json:"consumer_full,omitempty"`
	// Hedgeable lists, once the run has nothing left to deliver, the
	// requests this worker is generating that a faster worker may hedge
	// (send a second copy of; see HedgeNotice): the oldest first, at most
	// MaxHedgeable. Empty while prompts are still queued, and with
	// --turns all, whose conversations are never hedged.
	Hedgeable []Flight `json:"hedgeable,omitempty"`
	// Hedges counts the hedges this worker has sent, and HedgesWon those
	// whose answer it stored first; HedgedTokens counts the completion
	// tokens generated twice: those of the copy that lost, on either
	// side (a lost hedge here, or a request here that a hedge elsewhere
	// beat).
	Hedges       int64 `json:"hedges,omitempty"`
	HedgesWon    int64 `json:"hedges_won,omitempty"`
	HedgedTokens int64 `json:"hedged_tokens,omitempty"`
	// HintError is how far the run's length hints fall short, as this
	// worker has seen: the 99th percentile of its answers' lengths over
	// their prompts' hints (3 means that one answer in a hundred ran to
	// three times its hint or more), over HintedAnswers answers. Both are
	// zero until it has answered MinHintedAnswers prompts with hints. A
	// worker much slower than the others starts a hinted prompt only if,
	// that much longer than its hint, it would still be done in time.
	HintError     float64 `json:"hint_error,omitempty"`
	HintedAnswers int     `json:"hinted_answers,omitempty"`
	// Speed is the completion tokens a second that each of this worker's
	// requests streams, as it measures it; 0 while unknown. Other workers
	// compare it with their own.
	Speed float64 `json:"speed,omitempty"`
	// Version is the worker's aerie version (BuildVersion), and Features
	// the features it implements (Implemented). Both are empty from a
	// worker older than feature checks, which reads manifests of version
	// 1 only: it serves no run that needs a feature.
	Version  string   `json:"version,omitempty"`
	Features []string `json:"features,omitempty"`
	// Lacks is set when the worker leaves the run alone because it lacks
	// these features, which the run or one of its messages needs; it is
	// then Paused, and LacksWrittenBy is the aerie version that wrote
	// the run (or the message), one that has them.
	Lacks          []string `json:"lacks,omitempty"`
	LacksWrittenBy string   `json:"lacks_written_by,omitempty"`
}

// MinHintedAnswers is how many answers to hinted prompts a worker
// counts before it reports Heartbeat.HintError: fewer say little of a
// 99th percentile.
const MinHintedAnswers = 100

// MaxHedgeable bounds Heartbeat.Hedgeable, so that a worker with a large
// window keeps its heartbeats small; the oldest requests, the likeliest
// to be worth a hedge, are kept.
const MaxHedgeable = 256

// Flight is one request a worker is generating, as Heartbeat.Hedgeable
// lists it.
type Flight struct {
	// Seq is the prompt message's sequence in PromptsStream, where a
	// hedging worker reads the prompt.
	Seq    uint64 `json:"seq"`
	ID     string `json:"id"`
	Sample int    `json:"sample,omitempty"`
	// Tokens is the completion tokens streamed so far, and ElapsedMillis
	// how long ago the request was sent.
	Tokens        int   `json:"tokens"`
	ElapsedMillis int64 `json:"elapsed_ms"`
	// Hint is the prompt's length hint in tokens (0: none).
	Hint int `json:"hint,omitempty"`
	// Hedged is set once another worker has announced a hedge of it:
	// no second one is sent.
	Hedged bool `json:"hedged,omitempty"`
}

// Stragglers is what the ETA waits on when the run's longest answers
// set its end.
type Stragglers struct {
	// InFlight counts the answers in flight the end waits on; zero while
	// prompts are still to be handed out, when it waits on the longest of
	// the answers still to come.
	InFlight int `json:"in_flight"`
	// LongestTokens is the tokens streamed so far by the longest answer in
	// flight, and LongestSec how long ago it was sent (0 when its worker
	// does not say).
	LongestTokens int     `json:"longest_tokens,omitempty"`
	LongestSec    float64 `json:"longest_sec,omitempty"`
}

// HedgeNotice is what a worker publishes on HedgeSubject about a hedge:
// that it sends one (HedgeStarted), or that it stored the answer of a
// hedged request first (HedgeWon), whichever side it is on, so that the
// other copy is cancelled. A notice lost costs only GPU time: the copy
// that finishes second finds the answer stored and is dropped.
type HedgeNotice struct {
	Run    string `json:"run"`
	Worker string `json:"worker"`
	Event  string `json:"event"`
	Seq    uint64 `json:"seq"`
	ID     string `json:"id"`
	Sample int    `json:"sample,omitempty"`
}

// HedgeNotice events.
const (
	HedgeStarted = "started"
	HedgeWon     = "won"
)

// PausedStopping is the PausedReason of a worker that is shutting down.
const PausedStopping = "stopping"

// PausedRun is the PausedReason of a worker for a run that is paused
// (`aerie runs set RUN --pause`): its prompts stay queued.
const PausedRun = "run paused: `aerie runs set RUN --resume` resumes it"

// Throughput is what the aggregator publishes every few seconds on
// ThroughputSubject and appends to events.jsonl.
type Throughput struct {
	Run   string    `json:"run"`
	Time  time.Time `json:"time"`
	Phase Phase     `json:"phase"`
	// Total is the number of output lines the run expects: prompts times
	// samples (Manifest.Total).
	Total int `json:"total"`
	// TotalTurns and CompletedTurns count requests (turns) rather than
	// lines, with --turns all: the ETA is computed in turns, so that a mix
	// of one- and five-turn conversations is measured honestly.
	// CompletedTurns includes the turns of conversations still going
	// (Heartbeat.InterimTurns) and those a failure or a kept truncated
	// turn left ungenerated. Both are zero with --turns last.
	TotalTurns     int `json:"total_turns,omitempty"`
	CompletedTurns int `json:"completed_turns,omitempty"`
	// Completed and Failed count lines in completions.jsonl and failed.jsonl,
	// including those written before the aggregator (re)started.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Truncated counts completions whose finish_reason was "length".
	Truncated int `json:"truncated"`
	// HintedAnswers counts the completed lines whose prompt had a length
	// hint, and HintRankCorrelation is Spearman's rank correlation
	// between their hints and the tokens they took (over a sample of
	// 4,096 of them at most): 1 when the hints ordered the answers
	// exactly, 0 when they said nothing. Absent with fewer than three.
	HintedAnswers       int     `json:"hinted_answers,omitempty"`
	HintRankCorrelation float64 `json:"hint_rank_correlation,omitempty"`
	// InFlight is the sum of the in-flight counts of live workers, at most
	// the lines not yet completed or failed (zero once the run is done).
	InFlight int `json:"in_flight"`
	// Stranded counts the prompts held by workers gone silent without
	// stopping (killed, or cut off), which come back to the queue once
	// their AckWait is over, at the latest StrandedBackSec from the
	// event; the ETA is no earlier. Both are absent when none is.
	Stranded        int     `json:"stranded,omitempty"`
	StrandedBackSec float64 `json:"stranded_back_sec,omitempty"`
	// Stragglers says what the ETA waits on once nothing is left to hand
	// out (the answers in flight), and before that when the run's longest
	// answers still to come, rather than its bulk, set it (docs/eta.md,
	// "Stragglers"). Absent otherwise, and from an aggregator older than
	// the field.
	Stragglers *Stragglers `json:"stragglers,omitempty"`
	// PrefillRelief is how much faster the run's requests decode once no
	// new prompts are prefilled beside them, as measured in steady state
	// and taken for the drain (docs/eta.md, "Prefill relief"): 1 on a
	// backend whose requests do not slow with arrivals. Absent until
	// measured, and from an aggregator older than the field.
	PrefillRelief float64 `json:"prefill_relief,omitempty"`
	// WaitingForSlots is set while the run has prompts queued and live
	// workers that are not paused, none of which holds any of them, for
	// two events running: workers that serve several runs give
	// their slots to others (aerie work --runs, --all-runs). Priority is
	// the run's priority then (its manifest's schedule).
	WaitingForSlots bool `json:"waiting_for_slots,omitempty"`
	Priority        int  `json:"priority,omitempty"`
	// Workers is the number of workers heard from recently.
	Workers int `json:"workers"`
	// Rates over the last minute (or since start, when shorter) and over the
	// whole life of this aggregator.
	RequestsPerSec        float64 `json:"requests_per_sec"`
	RequestsPerSecOverall float64 `json:"requests_per_sec_overall"`
	TokensPerSec          float64 `json:"tokens_per_sec"`
	TokensPerSecOverall   float64 `json:"tokens_per_sec_overall"`
	// MeanCompletionTokens is the mean completion length of the answers
	// written so far (biased low during ramp-up: short answers finish first).
	MeanCompletionTokens float64 `json:"mean_completion_tokens"`
	// EstimatedCompletionTokens is the mean completion length used for the
	// ETA: during ramp-up it also counts the tokens of answers still being
	// generated, which corrects most of that bias.
	EstimatedCompletionTokens float64 `json:"estimated_completion_tokens"`
	ElapsedSec                float64 `json:"elapsed_sec"`
	// ETASec is the estimated time to completion in seconds; negative when
	// there is not yet enough information to estimate.
	ETASec float64 `json:"eta_sec"`
	// ETALowSec and ETAHighSec bound the time to completion: the true
	// finish lies between them in at least four runs out of five
	// (docs/eta.md measures it). Both are negative when ETASec is, and
	// equal to it when the run is done.
	ETALowSec  float64 `json:"eta_low_sec"`
	ETAHighSec float64 `json:"eta_high_sec"`
	// FailedByReason counts the lines of failed.jsonl by their reason
	// class (schema.Reason*), so that a failure rate tells what failed
	// without reading the file. Nil when nothing failed.
	FailedByReason map[string]int `json:"failed_by_reason,omitempty"`
	// PausedWorkers names the live workers that have stopped pulling, with
	// why (for example, their backend is down).
	PausedWorkers map[string]string `json:"paused_workers,omitempty"`
	// WriteError, when set, is why the aggregator cannot write its output
	// (a full disk, say): it is not acknowledging results until it can.
	WriteError string `json:"write_error,omitempty"`
	// Unwritten, when set, counts the lines the run lacks that nothing
	// will bring: no prompt is queued or in flight and no result or dead
	// letter waits to be written, twice running 10 s apart. They were
	// written to another directory, or the files were deleted, or the
	// broker lost prompts; the aggregator's warning says how to get them
	// back. Zero (absent) otherwise.
	Unwritten int `json:"unwritten,omitempty"`
	// AggregatorVersion is the aerie version of the aggregator that
	// publishes the event; empty from one older than the field.
	AggregatorVersion string `json:"aggregator_version,omitempty"`
	// AggregatorLacks is set while the aggregator writes nothing of the
	// run because it lacks these features, which the run or one of its
	// results needs; AggregatorLacksWrittenBy is the aerie version that
	// wrote the run (or the result), one that has them.
	AggregatorLacks          []string `json:"aggregator_lacks,omitempty"`
	AggregatorLacksWrittenBy string   `json:"aggregator_lacks_written_by,omitempty"`
	// Task is the run's task kind other than chat. For a hidden-states
	// run every token figure counts the samples' input tokens extracted
	// (an answer is a sample), and HiddenStatesBytes, of
	// HiddenStatesBytesTotal, is the hidden states written so far,
	// HiddenStatesBytesPerSec their recent rate (the files' headers
	// aside).
	Task                    string  `json:"task,omitempty"`
	HiddenStatesBytes       int64   `json:"hidden_states_bytes,omitempty"`
	HiddenStatesBytesTotal  int64   `json:"hidden_states_bytes_total,omitempty"`
	HiddenStatesBytesPerSec float64 `json:"hidden_states_bytes_per_sec,omitempty"`
}

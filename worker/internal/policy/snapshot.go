package policy

import (
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// Config is what the decisions depend on of the worker's configuration,
// as the worker has filled in its defaults.
type Config struct {
	// Auto sizes the window from the backend's load; Window is the fixed
	// window (and the one an automatic window starts from and falls back
	// to), MaxWindow bounds an automatic one.
	Auto              bool
	Window, MaxWindow int
	// HandBackAfter is the least time a request must have waited without
	// a first token to be handed back at the end of a run; zero or less
	// never hands back.
	HandBackAfter time.Duration
	// AckEvery is how often a worker looks for a full consumer.
	AckEvery time.Duration
	// Yield caps the window for serving traffic, holding the server's
	// TTFT p95 to TTFTSLO (see YieldPolicy).
	Yield   bool
	TTFTSLO time.Duration
	// Hedge sends second copies of slower workers' requests at the end
	// of a run, at most HedgeMax at once (0: as many as slots are free).
	Hedge    bool
	HedgeMax int
	// PeekEvery is how long a slow worker waits before it reads the
	// hints of a run's queue again, once a reading found none.
	PeekEvery time.Duration
}

// handsBack reports whether requests may be handed back at the end of a
// run.
func (c Config) handsBack() bool { return c.HandBackAfter > 0 }

// Snapshot is one look at the worker, its backend and its runs, taken
// for one decision. It holds plain values only.
type Snapshot struct {
	Now time.Time
	// Size is the window's size and Taken its slots in use (more than
	// Size after a resize down); Generating counts the requests at the
	// backend; Pulling is set while a pull has messages outstanding.
	Size, Taken, Generating int
	Pulling                 bool
	// Holds are the worker's own holds (stopping, its breaker, a full
	// store), the same for every run; each lane has the run's.
	Holds Holds
	// Load is the backend's own load, when it was asked for.
	Load LoadReading
	// Pace is what this worker's own requests have shown of its speed.
	Pace PaceReading
	// Flights are the requests in flight, in key order.
	Flights []Flight
	// Lanes are the runs served, in the worker's order.
	Lanes []Lane
}

// Pause is what holds the worker from lane i's run: its own holds and
// the run's (see Holds.Pause).
func (s Snapshot) Pause(i int) Pause { return s.Holds.With(s.Lanes[i].Holds).Pause() }

// LoadReading is a reading of the backend's own load: Load when it was
// read, Err when it could not be (both nil when it was not asked for).
type LoadReading struct {
	Load *Load
	Err  error
	// NotServed says the backend serves no load metrics at all;
	// NoReader that it has no way to read its server's metrics.
	NotServed, NoReader bool
}

// PaceReading is what this worker has measured of its own requests.
type PaceReading struct {
	// Latency is the moving mean of its request times, from sending to
	// the last token (0 before any); LeastTTFT the backend's shortest
	// time to first token (0 before any).
	Latency, LeastTTFT time.Duration
	// Tokens is the completion tokens it has streamed, over every run.
	Tokens int64
}

// Load is one reading of a vLLM server's own metrics.
type Load struct {
	// Running and Waiting are the requests in the engine's batch and in
	// its queue (vllm:num_requests_running, vllm:num_requests_waiting),
	// summed over engines and models.
	Running, Waiting float64
	// KVUsage is the KV cache's use, 0 to 1: the fullest engine's.
	KVUsage float64
	// Preemptions counts the sequences the engine has preempted since it
	// started, summed.
	Preemptions float64
	// TTFT is the server's time-to-first-token histogram, summed over
	// engines and models: cumulative counts by upper bound, ascending;
	// nil when the server has none.
	TTFT []Bucket
}

// Bucket is one cumulative bucket of a histogram: Count observations at
// or below LE.
type Bucket struct {
	LE, Count float64
}

// FlightKind tells the requests of one prompt message apart.
type FlightKind int

const (
	// Delivery is the request of a delivered prompt (or of all the
	// samples of a message, asked for at once).
	Delivery FlightKind = iota
	// SampleOf is the request of one sample of a message, asked alone.
	SampleOf
	// HedgeOf is this worker's hedge of another worker's request.
	HedgeOf
)

// FlightKey names a request in flight: the stream sequence of its
// prompt message, its kind and, for SampleOf, its sample.
type FlightKey struct {
	Seq    uint64
	Kind   FlightKind
	Sample int
}

// Compare orders keys by sequence, then kind, then sample.
func (k FlightKey) Compare(o FlightKey) int {
	switch {
	case k.Seq != o.Seq:
		return cmpInt(k.Seq, o.Seq)
	case k.Kind != o.Kind:
		return cmpInt(k.Kind, o.Kind)
	}
	return cmpInt(k.Sample, o.Sample)
}

func cmpInt[T ~int | ~uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FlightState is where a request is in its life.
type FlightState int32

const (
	// FlightWaiting: sent (or about to be), no token yet.
	FlightWaiting FlightState = iota
	// FlightStreaming: a token has come; never handed back at the end of
	// a run.
	FlightStreaming
	// FlightHandedBack: cancelled to be handed back.
	FlightHandedBack
	// FlightHedgedAway: cancelled because a hedge elsewhere stored its
	// answer first.
	FlightHedgedAway
)

// Flight is one request in flight.
type Flight struct {
	Key FlightKey
	// Lane is the index of its run in Snapshot.Lanes, and Unit the
	// prompt and sample it answers.
	Lane  int
	Unit  schema.Unit
	State FlightState
	// Tokens is the completion tokens it has streamed.
	Tokens int64
	// Hint is its prompt's length hint (0: none) and Attempt its
	// delivery.
	Hint, Attempt int
	// Last marks the prompt's last delivery, never handed back; Group a
	// request of a message of several samples, never hedged.
	Last, Group bool
	// Sent is when the request was sent; zero before.
	Sent time.Time
}

// Lane is what is known of one run served.
type Lane struct {
	// MaxDeliver is the run's consumer's (0: no limit).
	MaxDeliver int
	// Peers is what the run's other workers said in their heartbeats.
	Peers Peers
	// Holds are the run's own holds (paused, gone, held back), and
	// ConsumerFull its consumer-full state, as last applied.
	Holds        Holds
	ConsumerFull bool
	// Consumer is the run's consumer as read for this decision; nil when
	// it was not read (see Reads) or could not be.
	Consumer *Consumer
	// Hedges counts the hedges this worker runs for the run; Lengths are
	// the run's answer lengths, sorted, read when some peer requests are
	// hedgeable.
	Hedges  int
	Lengths []int
	// HintError is this worker's hints' error for the run (see
	// HintError), 0 until it has answered enough hinted prompts.
	HintError float64
	// NextHint is the length hint of the prompt next in the run's queue,
	// and MeanHint the mean of the hints left in it, as read for this
	// decision (-1 and 0: not read; see Reads).
	NextHint int
	MeanHint float64
	// Bounced is set when a prompt was handed back for its hint since the
	// last decision.
	Bounced bool
}

// Peers is what the other workers of a run that were heard from within
// three heartbeats said.
type Peers struct {
	// Pulling are those that pull prompts: neither paused nor holding
	// back.
	Pulling []Peer
	// Free is their free slots, Workers counts them and Windows sums
	// their windows.
	Free, Workers, Windows int
	// Hedgeable are the requests they list that this worker may hedge,
	// less those it hedges already.
	Hedgeable []PeerFlight
}

// Peer is what a worker knows of another worker of the run from its
// heartbeats.
type Peer struct {
	Rate     float64 // prompts completed a second
	InFlight int     // prompts held
	Free     int     // window slots free
	// Speed is the tokens a second of each of its requests, 0 while
	// unknown; HintError the hints' error it reports, 0 for none.
	Speed, HintError float64
}

// PeerFlight is a request of another worker of the run, as its last
// heartbeat listed it.
type PeerFlight struct {
	schema.Flight
	Worker string
	// Speed is that worker's tokens a second per request, Age how long
	// ago its heartbeat came.
	Speed float64
	Age   time.Duration
}

// Consumer is what the decision uses of a run's consumer.
type Consumer struct {
	Durable                   string
	Pending                   uint64
	AckPending, MaxAckPending int
	// Delivered is the last stream sequence delivered, and Filter the
	// consumer's one filter subject ("" for none or several): the next
	// prompt it delivers, redeliveries aside, is the first after
	// Delivered on Filter.
	Delivered uint64
	Filter    string
}

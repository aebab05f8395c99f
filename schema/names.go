package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// Stream names. Each stream holds every run; subjects carry the run name so
// that runs share one deployment and the `nats` CLI can filter by run.
const (
	// PromptsStream keeps one message per prompt, forever (limits
	// retention, one message per subject, discard new per subject): a prompt
	// can be queued at most once, so producing again is always safe, and
	// acknowledged prompts stay for audit and replay.
	PromptsStream = "AERIE_PROMPTS"
	// ResultsStream keeps one result per prompt: a second answer to the same
	// prompt is rejected by the server, so the output never holds two.
	ResultsStream = "AERIE_RESULTS"
	// DeadStream keeps one dead letter per prompt: why it failed, with the
	// prompt itself, as the source for replay.
	DeadStream = "AERIE_DEAD"
	// EventsStream captures the JSON events for readers that come late. Its
	// messages expire; they are observations, not data.
	EventsStream = "AERIE_EVENTS"
	// AdvisoriesStream captures JetStream's max-deliveries advisories for
	// the prompts stream. They are plain core NATS messages, lost unless
	// something listens; kept in a stream, a prompt whose last delivery
	// died with its worker is still turned into a dead letter.
	AdvisoriesStream = "AERIE_ADVISORIES"
	// RunsBucket is the KV bucket holding one Manifest per run, keyed by
	// run name.
	RunsBucket = "aerie-runs"
	// AttemptsBucket counts, per prompt, the failures attributable to the
	// prompt itself (not to a backend outage), keyed by AttemptsKey.
	AttemptsBucket = "aerie-attempts"
	// LeasesBucket holds leases: the aggregator of a run holds one
	// (AggregatorLeaseKey) for as long as it writes the run's files, so
	// that two aggregators, on one host or two, never write one run. Its
	// entries expire unless renewed (see Lease).
	LeasesBucket = "aerie-leases"
	// TurnsStream keeps, for a conversation generated with --turns all,
	// each finished turn but the last (Turn), one per subject, until the
	// conversation's result is stored: a worker continues a conversation
	// after its last stored turn.
	TurnsStream = "AERIE_TURNS"
)

// AggregatorLeaseKey is the key, in LeasesBucket, of the lease that lets
// one aggregator write run's output.
func AggregatorLeaseKey(run string) string { return "aggregator." + run }

// AttemptsKey is a prompt's key in AttemptsBucket.
func AttemptsKey(run string, u Unit) string { return run + "." + u.Token() }

// Subject roots. Subjects are <root>.<run>.<token> where token is
// SubjectToken(prompt id).
const (
	PromptsRoot = "aerie.prompts"
	ResultsRoot = "aerie.results"
	DeadRoot    = "aerie.dead"
	EventsRoot  = "aerie.events"
	TurnsRoot   = "aerie.turns"
)

// Header names. Every aerie message carries them so that `nats stream view`
// or `nats sub` tells what a message is without decoding the payload.
const (
	// HeaderMsgID is JetStream's de-duplication header.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderPromptID holds the prompt id as given in the input.
	HeaderPromptID = "Aerie-Prompt-Id"
	// HeaderRun holds the run name.
	HeaderRun = "Aerie-Run"
	// HeaderSchema holds "<kind>/<version>", for example "prompt/1".
	HeaderSchema = "Aerie-Schema"
	// HeaderContentType is "application/msgpack" for wire types and
	// "application/json" for events.
	HeaderContentType = "Content-Type"
	// HeaderWorker names the worker that produced a result or dead letter.
	HeaderWorker = "Aerie-Worker"
	// HeaderReason holds a dead letter's reason class.
	HeaderReason = "Aerie-Reason"
	// HeaderPromptSeq holds, on a dead letter, the stream sequence of the
	// prompt message whose delivery failed (DeadLetter.PromptSeq).
	HeaderPromptSeq = "Aerie-Prompt-Seq"
	// HeaderSample holds the sample of a unit (Unit.Sample) when it is
	// not 0.
	HeaderSample = "Aerie-Sample"
	// HeaderTurn holds, on a stored turn, its index from 0.
	HeaderTurn = "Aerie-Turn"
	// HeaderNeeds lists, comma separated, the features a reader must
	// implement to handle the message (see FeatureSamples): its run's and
	// its own. Absent when it needs none. A reader that lacks one hands
	// the message back, uncounted.
	HeaderNeeds = "Aerie-Needs"
	// HeaderWrittenBy is, beside HeaderNeeds, the aerie version that
	// wrote the message: one that has every feature it lists.
	HeaderWrittenBy = "Aerie-Written-By"
)

// Content types.
const (
	ContentTypeMsgpack = "application/msgpack"
	ContentTypeJSON    = "application/json"
)

var runName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidateRun checks that a run name can be used in subjects, consumer
// names and KV keys: 1 to 64 letters, digits, '-' or '_'.
func ValidateRun(run string) error {
	if !runName.MatchString(run) {
		return fmt.Errorf("run name %q is not valid: use 1 to 64 letters, digits, '-' or '_' (it becomes part of subjects and consumer names)", run)
	}
	return nil
}

// SubjectToken turns a prompt id, which may be any string, into a subject
// token: the first 16 bytes of its SHA-256 in hex. Subject tokens may not
// contain '.', '*', '>' or white space, so ids cannot be used directly; the
// real id travels in HeaderPromptID and in the payload.
func SubjectToken(promptID string) string {
	sum := sha256.Sum256([]byte(promptID))
	return hex.EncodeToString(sum[:16])
}

// PromptSubject is the subject of one unit (prompt and sample) of a run.
func PromptSubject(run string, u Unit) string {
	return PromptsRoot + "." + run + "." + u.Token()
}

// ResultSubject is the subject of the one result of a unit.
func ResultSubject(run string, u Unit) string {
	return ResultsRoot + "." + run + "." + u.Token()
}

// DeadSubject is the subject of the dead letter of a unit.
func DeadSubject(run string, u Unit) string {
	return DeadRoot + "." + run + "." + u.Token()
}

// TurnSubject is the subject of turn (from 0) of a unit generated with
// --turns all: <root>.<run>.<unit token>.<turn>.
func TurnSubject(run string, u Unit, turn int) string {
	return TurnsRoot + "." + run + "." + u.Token() + "." + strconv.Itoa(turn)
}

// TurnsFilter matches every stored turn of a unit.
func TurnsFilter(run string, u Unit) string {
	return TurnsRoot + "." + run + "." + u.Token() + ".*"
}

// PromptToken returns the subject token of a message about one prompt,
// the last token of its subject (<root>.<run>.<token>).
func PromptToken(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

// RunFilter returns the filter subject covering every message of run under
// root, for consumers: "<root>.<run>.>".
func RunFilter(root, run string) string { return root + "." + run + ".>" }

// MaxDeliveriesSubject is where JetStream announces that a prompt of
// run reached MaxDeliver on the workers' consumer.
func MaxDeliveriesSubject(run string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + PromptsStream + "." + WorkersConsumer(run)
}

// AdvisoriesConsumer is the aggregator's durable consumer on
// AdvisoriesStream.
func AdvisoriesConsumer(run string) string { return "aggregator-advisories-" + run }

// ThroughputSubject carries the aggregator's Throughput events.
func ThroughputSubject(run string) string { return EventsRoot + "." + run + ".throughput" }

// HeartbeatSubject carries a worker's Heartbeat events.
func HeartbeatSubject(run, worker string) string {
	return EventsRoot + "." + run + ".heartbeat." + worker
}

// HedgeSubject carries a worker's HedgeNotice events.
func HedgeSubject(run, worker string) string { return EventsRoot + "." + run + ".hedge." + worker }

// HedgeFilter matches the hedge notices of every worker of run.
func HedgeFilter(run string) string { return EventsRoot + "." + run + ".hedge.*" }

// HeartbeatFilter matches the heartbeats of every worker of run.
func HeartbeatFilter(run string) string { return EventsRoot + "." + run + ".heartbeat.*" }

// WorkersConsumer is the durable pull consumer on PromptsStream shared by
// every worker of run.
func WorkersConsumer(run string) string { return "workers-" + run }

// ResultsConsumer is the aggregator's durable consumer on ResultsStream.
func ResultsConsumer(run string) string { return "aggregator-" + run }

// DeadConsumer is the aggregator's durable consumer on DeadStream.
func DeadConsumer(run string) string { return "aggregator-dead-" + run }

// DeadMsgID is the Nats-Msg-Id of the dead letter written for one
// delivery of a prompt message (promptSeq is its stream sequence).
// Retries of the same publish share it; a later failure of the same
// prompt, after a replay, gets another, so JetStream's de-duplication
// window cannot swallow it.
func DeadMsgID(run, subjectToken string, promptSeq, delivery uint64) string {
	return fmt.Sprintf("%s/%s/%d.%d", run, subjectToken, promptSeq, delivery)
}

// DeadLetterPromptSeq returns the stream sequence of the prompt message a
// stored dead letter was written for, from its HeaderPromptSeq or, for a
// dead letter written before that header existed, from its message id
// (DeadMsgID). ok is false when neither says.
func DeadLetterPromptSeq(h nats.Header) (seq uint64, ok bool) {
	if v := h.Get(HeaderPromptSeq); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil && n > 0
	}
	id := h.Get(HeaderMsgID)
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return 0, false
	}
	seqText, _, found := strings.Cut(id[i+1:], ".")
	if !found {
		return 0, false
	}
	n, err := strconv.ParseUint(seqText, 10, 64)
	return n, err == nil && n > 0
}

// MsgID is the Nats-Msg-Id of every message about one unit of a run. It
// is unique per stream, so the same value serves prompts, results and
// dead letters.
func MsgID(run string, u Unit) string { return run + "/" + u.Token() }

// SafeToken turns any string (a host name, say) into a subject token by
// replacing every character outside [A-Za-z0-9_-] with '-'. An empty
// string becomes "unnamed".
func SafeToken(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !ok {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "unnamed"
	}
	return string(b)
}

package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// minAckWait is the shortest AckWait that leaves progress acks room.
// Workers send one every AckWait/3; under 3 s that is every second or
// less, and a short stall (a garbage collection, a slow network, a NATS
// leader change) lets the timer fire, so a prompt still being generated
// is handed to a second worker.
const minAckWait = 3 * time.Second

// finding is one observation of a check that looks at several things.
type finding struct {
	status Status
	text   string
}

// worst is the most serious status among fs: Fail, then Warn, then Pass.
func worst(fs []finding) Status {
	st := Pass
	for _, f := range fs {
		switch {
		case f.status == Fail:
			return Fail
		case f.status == Warn:
			st = Warn
		}
	}
	return st
}

func joinFindings(fs []finding) string {
	texts := make([]string, len(fs))
	for i, f := range fs {
		texts[i] = f.text
	}
	return strings.Join(texts, ", ")
}

// promptsPerSlot is how many prompts a worker holds per slot of its
// window: one generating and one whose result is being stored (the
// worker's heldPerSlot).
const promptsPerSlot = 2

// checkConsumer looks at the run's workers consumer, if it exists yet:
// its AckWait against the workers' progress acks, its MaxAckPending
// against workers x window (and twice that, what they may hold), its
// MaxDeliver and its ack policy.
func checkConsumer(ctx context.Context, s *session) Result {
	if s.cfg.Run == "" {
		return skip("no run given (--run)")
	}
	if s.js == nil {
		return skip("no JetStream (see jetstream)")
	}
	name := schema.WorkersConsumer(s.cfg.Run)
	c, err := s.js.Consumer(ctx, schema.PromptsStream, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return skip("stream %s does not exist yet", schema.PromptsStream)
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return skip("consumer %s does not exist yet: aerie produce or the first worker creates it (AckWait %v, MaxDeliver %d, MaxAckPending %d unless produce is told otherwise)",
			name, provision.DefaultAckWait, provision.DefaultMaxDeliver, provision.DefaultMaxAckPending)
	case err != nil:
		return fail("check the NATS connection and permissions", "look up consumer %s on %s: %v", name, schema.PromptsStream, err)
	}
	info := c.CachedInfo()
	s.consumer = info
	cfg := info.Config

	var fs []finding
	var edits []string // flags of `nats consumer edit` that fix what failed
	add := func(st Status, edit, format string, args ...any) {
		fs = append(fs, finding{st, fmt.Sprintf(format, args...)})
		if edit != "" {
			edits = append(edits, edit)
		}
	}

	if cfg.AckWait < minAckWait {
		add(Fail, fmt.Sprintf("--wait %v", provision.DefaultAckWait),
			"AckWait %v is under %v: progress acks every %v race its timer, so prompts still generating are redelivered",
			cfg.AckWait, minAckWait, formatDuration(cfg.AckWait/3))
	} else {
		add(Pass, "", "AckWait %v (progress acks every %v)", cfg.AckWait, formatDuration(cfg.AckWait/3))
	}

	need := s.cfg.Workers * s.cfg.Window
	grown := promptsPerSlot * s.cfg.Workers * s.cfg.MaxWindow // with --window auto
	demand := fmt.Sprintf("%s x %d window = %d", plural(s.cfg.Workers, "worker"), s.cfg.Window, need)
	switch {
	case cfg.MaxAckPending < 0:
		add(Pass, "", "MaxAckPending unlimited")
	case cfg.MaxAckPending < need:
		add(Fail, fmt.Sprintf("--max-pending %d", promptsPerSlot*need),
			"MaxAckPending %d < %s: workers would sit with free slots",
			cfg.MaxAckPending, demand)
	case cfg.MaxAckPending < promptsPerSlot*need:
		add(Warn, fmt.Sprintf("--max-pending %d", promptsPerSlot*need),
			"MaxAckPending %d < %d prompts per slot x %s x %d window = %d: slots wait while results are stored",
			cfg.MaxAckPending, promptsPerSlot, plural(s.cfg.Workers, "worker"), s.cfg.Window, promptsPerSlot*need)
	case s.cfg.AutoWindow && cfg.MaxAckPending < grown:
		add(Warn, fmt.Sprintf("--max-pending %d", grown),
			"MaxAckPending %d < %d prompts per slot x %s x %d max window = %d: automatic windows grown that far would find the consumer full (workers say so if they do), or lower --max-window",
			cfg.MaxAckPending, promptsPerSlot, plural(s.cfg.Workers, "worker"), s.cfg.MaxWindow, grown)
	case s.cfg.AutoWindow:
		add(Pass, "", "MaxAckPending %d >= %d prompts per slot x %s x %d max window", cfg.MaxAckPending, promptsPerSlot, plural(s.cfg.Workers, "worker"), s.cfg.MaxWindow)
	default:
		add(Pass, "", "MaxAckPending %d >= %s", cfg.MaxAckPending, demand)
	}

	maxDeliver := fmt.Sprintf("--max-deliver %d", provision.DefaultMaxDeliver)
	switch {
	case cfg.MaxDeliver <= 0:
		add(Warn, maxDeliver, "MaxDeliver unlimited: a prompt that crashes every worker it reaches is delivered forever")
	case cfg.MaxDeliver == 1:
		add(Fail, maxDeliver, "MaxDeliver 1: a prompt handed back once (a failure, a worker restart, a backend outage) is never delivered again")
	case s.manifest != nil && cfg.MaxDeliver <= s.manifest.Policy.Attempts():
		add(Warn, maxDeliver, "MaxDeliver %d <= the run's max_attempts %d: deliveries, which also count hand-backs during outages, run out before the run's attempts do",
			cfg.MaxDeliver, s.manifest.Policy.Attempts())
	default:
		add(Pass, "", "MaxDeliver %d", cfg.MaxDeliver)
	}

	recreate := ""
	if cfg.AckPolicy != jetstream.AckExplicitPolicy {
		add(Fail, "", "ack policy %s (want explicit: each prompt is acknowledged once its result is stored)",
			strings.TrimPrefix(lower(cfg.AckPolicy), "ack"))
		recreate = "an ack policy cannot be edited: produce the prompts again under a new run name"
	} else {
		add(Pass, "", "ack explicit")
	}

	detail := fmt.Sprintf("%s: %s; %d prompts waiting, %d in flight, %d redelivered",
		name, joinFindings(fs), info.NumPending, info.NumAckPending, info.NumRedelivered)
	var fixes []string
	if len(edits) > 0 {
		fixes = append(fixes, fmt.Sprintf("nats consumer edit %s %s %s", schema.PromptsStream, name, strings.Join(edits, " ")))
	}
	if recreate != "" {
		fixes = append(fixes, recreate)
	}
	return Result{Status: worst(fs), Detail: detail, Fix: strings.Join(fixes, "; ")}
}

// checkManifest reads the run's manifest from the runs bucket, without
// creating the bucket when it is missing.
func checkManifest(ctx context.Context, s *session) Result {
	if s.cfg.Run == "" {
		return skip("no run given (--run)")
	}
	if s.js == nil {
		return skip("no JetStream (see jetstream)")
	}
	produce := fmt.Sprintf("aerie produce --run %s --prompts FILE --model MODEL writes it; or check --run", s.cfg.Run)
	kv, err := s.js.KeyValue(ctx, schema.RunsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return warn(produce, "bucket %s does not exist: no run has been produced on this NATS yet", schema.RunsBucket)
	}
	if err != nil {
		return fail("check the NATS connection and permissions", "open bucket %s: %v", schema.RunsBucket, err)
	}
	entry, err := kv.Get(ctx, s.cfg.Run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		detail := fmt.Sprintf("no manifest for run %q in bucket %s", s.cfg.Run, schema.RunsBucket)
		// Listing the bucket's keys takes a consumer some roles may not
		// create.
		if s.mayPublish("$JS.API.CONSUMER.CREATE.KV_" + schema.RunsBucket + ".watch.$KV." + schema.RunsBucket + ".>") {
			if runs := knownRuns(ctx, kv); len(runs) > 0 {
				detail += "; runs there: " + quoteList(runs, 5)
			}
		}
		return warn(produce, "%s", detail)
	}
	if err != nil {
		return fail("check the NATS connection and permissions", "read manifest of run %s: %v", s.cfg.Run, err)
	}
	m, err := schema.DecodeManifest(entry.Value())
	if err != nil {
		return fail("use the aerie version that produced this run, or produce the prompts under a new run name",
			"manifest of run %s is not readable: %v", s.cfg.Run, err)
	}
	s.manifest = m
	if err := schema.CheckNeeds("run "+m.Run, m.Needs, m.WrittenBy); err != nil {
		return warn("run the workers, aggregator and export of this run with an aerie that has them", "%v; a worker of this aerie leaves the run alone", err)
	}
	needs := "needs no feature (manifest version 1: every aerie serves it)"
	if len(m.Needs) > 0 {
		needs = "needs " + strings.Join(m.Needs, ", ")
	}
	return pass("run %s: model %q, %s, max_attempts %d, on_length %s; %d prompts, produced by %s at %s with aerie %s; %s",
		m.Run, m.Model, formatParams(m.Params), m.Policy.Attempts(), m.Policy.Length(),
		m.Total, orUnknown(m.Producer), m.CreatedAt.UTC().Format(time.RFC3339), orUnknown(m.WrittenBy), needs)
}

// knownRuns lists the runs in the bucket, for a report that names a run
// that is not there. Errors leave the list empty: it is only a hint.
func knownRuns(ctx context.Context, kv jetstream.KeyValue) []string {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil
	}
	defer func() { _ = lister.Stop() }()
	var runs []string
	for k := range lister.Keys() {
		runs = append(runs, k)
	}
	return runs
}

// formatParams renders sampling parameters, saying which are left to the
// backend.
func formatParams(p schema.Params) string {
	parts := make([]string, 0, 3)
	if p.MaxTokens > 0 {
		parts = append(parts, fmt.Sprintf("max_tokens %d", p.MaxTokens))
	} else {
		parts = append(parts, "max_tokens unset (the rest of the context)")
	}
	optional := func(name string, v *float64) {
		if v == nil {
			parts = append(parts, name+" backend default")
		} else {
			parts = append(parts, fmt.Sprintf("%s %g", name, *v))
		}
	}
	optional("temperature", p.Temperature)
	optional("top_p", p.TopP)
	return strings.Join(parts, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

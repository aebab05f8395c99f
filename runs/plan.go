package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/jsrequest"
	"github.com/aerie-dev/aerie/schema"
)

// HeartbeatWindow is how recent a worker heartbeat must be for the run to
// count as worked on. Workers send one every 2 s, so 10 s is five missed
// in a row: the window throughput events use to count live workers.
const HeartbeatWindow = 10 * time.Second

// heartbeatWindow is HeartbeatWindow, shortened by tests.
var heartbeatWindow = HeartbeatWindow

// Removal is everything a run has on a server, as found by Plan and
// removed by Remove. Streams, consumers and buckets that do not exist are
// left out.
type Removal struct {
	Run string `json:"run"`
	// Manifest is the run's manifest; nil when it has none, or when it
	// cannot be read (its key is still in Keys).
	Manifest *schema.Manifest `json:"manifest,omitempty"`
	// Messages counts the run's messages in each of aerie's streams.
	Messages []StreamMessages `json:"messages"`
	// Consumers are the run's durable consumers.
	Consumers []Consumer `json:"consumers"`
	// Keys are the run's KV keys: its manifest, its failure counts and its
	// aggregator lease, for those that exist.
	Keys []BucketKeys `json:"keys"`
	// Lease is the aggregator lease of the run, nil when none is held.
	Lease *HeldLease `json:"lease,omitempty"`
	// Heartbeat is the run's latest worker heartbeat if it is more recent
	// than HeartbeatWindow, else nil.
	Heartbeat *RecentHeartbeat `json:"heartbeat,omitempty"`
}

// StreamMessages counts the messages of a run in one stream.
type StreamMessages struct {
	Stream string `json:"stream"`
	// Filter is the subject filter that selects the run's messages.
	Filter string `json:"filter"`
	Count  uint64 `json:"count"`
}

// Consumer names a durable consumer.
type Consumer struct {
	Stream string `json:"stream"`
	Name   string `json:"name"`
}

// BucketKeys counts the keys of a run in one KV bucket.
type BucketKeys struct {
	Bucket string `json:"bucket"`
	// Keys is a key, or a pattern such as "<run>.*".
	Keys  string `json:"keys"`
	Count uint64 `json:"count"`
}

// HeldLease is an aggregator lease that has not expired.
type HeldLease struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	// Lease is the lease's value; zero when it cannot be decoded.
	Lease schema.Lease `json:"lease"`
}

// RecentHeartbeat is a worker heartbeat stored less than HeartbeatWindow
// ago.
type RecentHeartbeat struct {
	Worker string    `json:"worker"`
	At     time.Time `json:"at"`
	// Paused is why the worker had stopped pulling, if it had (its
	// backend is down, or it is stopping and finishing what it holds).
	Paused string `json:"paused,omitempty"`
}

// Empty reports whether the run has nothing on the server.
func (r *Removal) Empty() bool {
	for _, m := range r.Messages {
		if m.Count > 0 {
			return false
		}
	}
	for _, k := range r.Keys {
		if k.Count > 0 {
			return false
		}
	}
	return len(r.Consumers) == 0
}

// Alive returns why the run looks worked on, or nothing when it does not:
// removing a live run pulls prompts and results from under its workers and
// aggregator.
func (r *Removal) Alive() []string {
	var why []string
	if l := r.Lease; l != nil {
		who := "an aggregator"
		if l.Lease.Host != "" {
			who = fmt.Sprintf("the aggregator on %s (pid %d, writing %s)", l.Lease.Host, l.Lease.PID, l.Lease.Dir)
		}
		why = append(why, fmt.Sprintf("%s holds the lease %s in KV bucket %s", who, l.Key, l.Bucket))
	}
	if h := r.Heartbeat; h != nil {
		beat := fmt.Sprintf("worker %s sent a heartbeat %s ago", h.Worker, time.Since(h.At).Round(time.Second))
		if h.Paused != "" {
			beat += " (paused: " + h.Paused + ")"
		}
		why = append(why, beat)
	}
	return why
}

// streamFilters are the subject filters of a run in each of aerie's
// streams. A stream the server does not have (AERIE_TURNS before any run
// used --turns all, say) is left out by Plan.
func streamFilters(run string) []StreamMessages {
	return []StreamMessages{
		{Stream: schema.PromptsStream, Filter: schema.RunFilter(schema.PromptsRoot, run)},
		{Stream: schema.ResultsStream, Filter: schema.RunFilter(schema.ResultsRoot, run)},
		{Stream: schema.DeadStream, Filter: schema.RunFilter(schema.DeadRoot, run)},
		{Stream: schema.EventsStream, Filter: schema.RunFilter(schema.EventsRoot, run)},
		{Stream: schema.AdvisoriesStream, Filter: schema.MaxDeliveriesSubject(run)},
		{Stream: schema.TurnsStream, Filter: schema.RunFilter(schema.TurnsRoot, run)},
	}
}

// consumers are the durable consumers a run may have.
func consumers(run string) []Consumer {
	return []Consumer{
		{Stream: schema.PromptsStream, Name: schema.WorkersConsumer(run)},
		{Stream: schema.ResultsStream, Name: schema.ResultsConsumer(run)},
		{Stream: schema.DeadStream, Name: schema.DeadConsumer(run)},
		{Stream: schema.AdvisoriesStream, Name: schema.AdvisoriesConsumer(run)},
	}
}

// attemptsPattern matches the run's keys in the attempts bucket
// (schema.AttemptsKey).
func attemptsPattern(run string) string { return run + ".*" }

// Plan finds everything run has on the server and changes nothing.
func Plan(ctx context.Context, js jetstream.JetStream, run string, opts Options) (*Removal, error) {
	if err := schema.ValidateRun(run); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return plan(ctx, js, run, opts.WithDefaults())
}

func plan(ctx context.Context, js jetstream.JetStream, run string, opts Options) (*Removal, error) {
	r := &Removal{Run: run, Messages: []StreamMessages{}, Consumers: []Consumer{}, Keys: []BucketKeys{}}
	for _, step := range []func(context.Context, jetstream.JetStream, Options, *Removal) error{
		planMessages, planConsumers, planManifest, planAttempts, planLease, planHeartbeat,
	} {
		if err := step(ctx, js, opts, r); err != nil {
			return nil, fmt.Errorf("look at what run %s has: %w", run, err)
		}
	}
	return r, nil
}

func planMessages(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	for _, m := range streamFilters(r.Run) {
		s, err := jsrequest.Stream(ctx, js, opts, m.Stream)
		if err != nil {
			return err
		}
		if s == nil {
			continue
		}
		if m.Count, err = countMessages(ctx, js, opts, m.Stream, m.Filter); err != nil {
			return err
		}
		r.Messages = append(r.Messages, m)
	}
	return nil
}

func planConsumers(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	for _, c := range consumers(r.Run) {
		exists, err := consumerExists(ctx, js, opts, c)
		if err != nil {
			return err
		}
		if exists {
			r.Consumers = append(r.Consumers, c)
		}
	}
	return nil
}

func planManifest(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	kv, err := jsrequest.Bucket(ctx, js, opts, schema.RunsBucket)
	if err != nil || kv == nil {
		return err
	}
	e, err := jsrequest.Key(ctx, kv, opts, r.Run)
	if err != nil || e == nil {
		return err
	}
	r.Manifest, _ = schema.DecodeManifest(e.Value()) // unreadable: removed all the same
	r.Keys = append(r.Keys, BucketKeys{Bucket: schema.RunsBucket, Keys: r.Run, Count: 1})
	return nil
}

func planAttempts(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	kv, err := jsrequest.Bucket(ctx, js, opts, schema.AttemptsBucket)
	if err != nil || kv == nil {
		return err
	}
	stream, filter, err := kvSubjects(ctx, kv, opts, attemptsPattern(r.Run))
	if err != nil {
		return err
	}
	n, err := countMessages(ctx, js, opts, stream, filter)
	if err != nil {
		return err
	}
	if n > 0 {
		r.Keys = append(r.Keys, BucketKeys{Bucket: schema.AttemptsBucket, Keys: attemptsPattern(r.Run), Count: n})
	}
	return nil
}

func planLease(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	kv, err := jsrequest.Bucket(ctx, js, opts, schema.LeasesBucket)
	if err != nil || kv == nil {
		return err
	}
	key := schema.AggregatorLeaseKey(r.Run)
	e, err := jsrequest.Key(ctx, kv, opts, key)
	if err != nil || e == nil {
		return err
	}
	// The bucket's TTL removes a lease its holder stopped renewing, so a
	// key that is there is held.
	held := &HeldLease{Bucket: schema.LeasesBucket, Key: key}
	_ = json.Unmarshal(e.Value(), &held.Lease) // unreadable: held all the same
	r.Lease = held
	r.Keys = append(r.Keys, BucketKeys{Bucket: schema.LeasesBucket, Keys: key, Count: 1})
	return nil
}

func planHeartbeat(ctx context.Context, js jetstream.JetStream, opts Options, r *Removal) error {
	events, err := jsrequest.Stream(ctx, js, opts, schema.EventsStream)
	if err != nil || events == nil {
		return err
	}
	msg, err := jsrequest.LastMsg(ctx, events, opts, schema.HeartbeatFilter(r.Run))
	if err != nil || msg == nil || time.Since(msg.Time) >= heartbeatWindow {
		return err
	}
	h := &RecentHeartbeat{Worker: msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:], At: msg.Time}
	var hb schema.Heartbeat
	if json.Unmarshal(msg.Data, &hb) == nil {
		if hb.Worker != "" {
			h.Worker = hb.Worker
		}
		if hb.Paused {
			h.Paused = hb.PausedReason
		}
	}
	r.Heartbeat = h
	return nil
}

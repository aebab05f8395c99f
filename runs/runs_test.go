package runs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// shape says how much state a run gets.
type shape struct {
	prompts, results, dead, attempts int
	completed, failed                int
	// turns stored of a conversation regenerated turn by turn
	turns int
	// tokenIDs makes the run ask for token ids: it needs token-ids.
	tokenIDs bool
}

var shapes = map[string]shape{
	"a":   {prompts: 5, results: 3, dead: 1, attempts: 2, completed: 3, failed: 1, turns: 2},
	"a-b": {prompts: 7, results: 2, dead: 2, attempts: 3, completed: 2, failed: 2, turns: 3, tokenIDs: true},
}

// queueRun gives run what a run has after some work: a manifest,
// prompts, the four consumers, results, dead letters, failure counts, a
// max-deliveries advisory, a heartbeat and a throughput event. Payloads
// are placeholders: only subjects matter here.
func queueRun(t *testing.T, js jetstream.JetStream, run string, s shape) {
	t.Helper()
	ctx := testContext(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Model: "model-" + run, Producer: "host-" + run,
		CreatedAt: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), ReturnTokenIDs: s.tokenIDs, WrittenBy: "v-" + run}, brokertest.Prompts(s.prompts))
	for _, create := range []func(context.Context, jetstream.JetStream, string) (jetstream.Consumer, error){
		provision.ResultsConsumer, provision.DeadConsumer, provision.AdvisoriesConsumer,
		func(ctx context.Context, js jetstream.JetStream, run string) (jetstream.Consumer, error) {
			return provision.WorkersConsumer(ctx, js, run, provision.Options{})
		},
	} {
		if _, err := create(ctx, js, run); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(subject string, data []byte) {
		t.Helper()
		if _, err := js.Publish(ctx, subject, data); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
	prompts := brokertest.Prompts(s.prompts)
	for _, p := range prompts[:s.results] {
		publish(schema.ResultSubject(run, schema.Unit{ID: p.ID}), []byte("result"))
	}
	for _, p := range prompts[s.results : s.results+s.dead] {
		publish(schema.DeadSubject(run, schema.Unit{ID: p.ID}), []byte("dead letter"))
	}
	attempts, err := provision.AttemptsBucket(ctx, js, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prompts[:s.attempts] {
		if _, err := attempts.Put(ctx, schema.AttemptsKey(run, schema.Unit{ID: p.ID}), []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range s.turns {
		publish(schema.TurnSubject(run, schema.Unit{ID: prompts[len(prompts)-1].ID, Sample: 1}, i), []byte("turn"))
	}
	publish(schema.MaxDeliveriesSubject(run), []byte(`{"type":"io.nats.jetstream.advisory.v1.max_deliver"}`))
	hb, _ := json.Marshal(schema.Heartbeat{Run: run, Worker: "w-" + run, Time: time.Now()})
	publish(schema.HeartbeatSubject(run, "w-"+run), hb)
	ev, _ := json.Marshal(schema.Throughput{Run: run, Time: time.Now(), Phase: schema.PhaseSteady,
		Total: s.prompts, Completed: s.completed, Failed: s.failed})
	publish(schema.ThroughputSubject(run), ev)
}

// world is a server holding two runs whose names share a prefix, so that
// a filter that matched too much would show.
func world(t *testing.T) jetstream.JetStream {
	_, _, js := brokertest.Provisioned(t)
	for run, s := range shapes {
		queueRun(t, js, run, s)
	}
	return js
}

// snapshot is the state of one run, read without the package under test.
type snapshot struct {
	Messages  map[string]uint64 // stream -> messages of the run
	Consumers []string
	Manifest  bool
	Attempts  int
	Lease     bool
}

func snap(t *testing.T, js jetstream.JetStream, run string) snapshot {
	t.Helper()
	ctx := testContext(t)
	s := snapshot{Messages: map[string]uint64{}}
	filters := map[string]string{
		schema.PromptsStream:    schema.RunFilter(schema.PromptsRoot, run),
		schema.ResultsStream:    schema.RunFilter(schema.ResultsRoot, run),
		schema.DeadStream:       schema.RunFilter(schema.DeadRoot, run),
		schema.EventsStream:     schema.RunFilter(schema.EventsRoot, run),
		schema.AdvisoriesStream: schema.MaxDeliveriesSubject(run),
		schema.TurnsStream:      schema.RunFilter(schema.TurnsRoot, run),
	}
	for stream, filter := range filters {
		st, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) && stream == schema.TurnsStream {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range info.State.Subjects {
			s.Messages[stream] += n
		}
		for name := range st.ListConsumers(ctx).Info() {
			if name.Config.Durable != "" && strings.HasSuffix(name.Name, "-"+run) {
				s.Consumers = append(s.Consumers, stream+"/"+name.Name)
			}
		}
	}
	slices.Sort(s.Consumers)
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Get(ctx, run)
	s.Manifest = err == nil
	attempts, err := js.KeyValue(ctx, schema.AttemptsBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := attempts.ListKeysFiltered(ctx, run+".*")
	if err != nil {
		t.Fatal(err)
	}
	for range keys.Keys() {
		s.Attempts++
	}
	if leases, err := js.KeyValue(ctx, schema.LeasesBucket); err == nil {
		_, err = leases.Get(ctx, schema.AggregatorLeaseKey(run))
		s.Lease = err == nil
	}
	return s
}

// want is the snapshot queueRun leaves.
func want(run string) snapshot {
	s := shapes[run]
	return snapshot{
		Messages: map[string]uint64{
			schema.PromptsStream: uint64(s.prompts), schema.ResultsStream: uint64(s.results),
			schema.DeadStream: uint64(s.dead), schema.EventsStream: 2, schema.AdvisoriesStream: 1,
			schema.TurnsStream: uint64(s.turns),
		},
		Consumers: []string{
			schema.AdvisoriesStream + "/" + schema.AdvisoriesConsumer(run),
			schema.DeadStream + "/" + schema.DeadConsumer(run),
			schema.PromptsStream + "/" + schema.WorkersConsumer(run),
			schema.ResultsStream + "/" + schema.ResultsConsumer(run),
		},
		Manifest: true,
		Attempts: s.attempts,
	}
}

func checkSnapshot(t *testing.T, what string, got, want snapshot) {
	t.Helper()
	if !maps.Equal(got.Messages, want.Messages) || !slices.Equal(got.Consumers, want.Consumers) ||
		got.Manifest != want.Manifest || got.Attempts != want.Attempts || got.Lease != want.Lease {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// noCountingConsumerLeft checks that the consumers Plan creates to count
// messages are gone.
func noCountingConsumerLeft(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := testContext(t)
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for c := range st.ListConsumers(ctx).Info() {
			if c.Config.Durable == "" {
				t.Errorf("consumer %s (%s) is left on stream %s", c.Name, c.Config.Description, name)
			}
		}
	}
}

var gone = snapshot{Messages: map[string]uint64{}}

func TestListShowsEveryRunWithItsProgress(t *testing.T) {
	js := world(t)
	list, err := runs.List(testContext(t), js, runs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Run != "a" || list[1].Run != "a-b" {
		t.Fatalf("List = %+v, want runs a and a-b in that order", list)
	}
	for _, s := range list {
		sh := shapes[s.Run]
		if s.Model != "model-"+s.Run || s.Total != sh.prompts || s.Producer != "host-"+s.Run ||
			!s.CreatedAt.Equal(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)) || s.Problem != "" {
			t.Errorf("summary %+v does not match the manifest of %s", s, s.Run)
		}
		p := s.Progress
		if p == nil || p.Completed != sh.completed || p.Failed != sh.failed || p.Phase != schema.PhaseSteady ||
			p.At.IsZero() || p.AgeSec < 0 || p.AgeSec > 60 {
			t.Errorf("progress of %s = %+v, want %d completed, %d failed, steady, just now", s.Run, p, sh.completed, sh.failed)
		}
	}
	var out bytes.Buffer
	if err := runs.WriteList(&out, list, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(list[1].Needs, []string{schema.FeatureTokenIDs}) || list[1].WrittenBy != "v-a-b" || list[0].Needs != nil {
		t.Errorf("needs %v (written by %q) and %v; want a-b to need token-ids and a nothing", list[1].Needs, list[1].WrittenBy, list[0].Needs)
	}
	for _, want := range []string{"RUN", "NEEDS", "token-ids", "model-a-b", "host-a", "3 completed, 1 failed, steady", "2 completed, 2 failed, steady"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table does not show %q:\n%s", want, out.String())
		}
	}
}

func TestListOnAnEmptyServer(t *testing.T) {
	_, js := brokertest.Connect(t, brokertest.Start(t))
	list, err := runs.List(testContext(t), js, runs.Options{})
	if err != nil || list == nil || len(list) != 0 {
		t.Fatalf("List = %#v, %v; want an empty, non-nil list", list, err)
	}
	b, _ := json.Marshal(list)
	if string(b) != "[]" {
		t.Fatalf("JSON of an empty list = %s, want []", b)
	}
	var out bytes.Buffer
	if err := runs.WriteList(&out, list, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no run on this server yet") {
		t.Fatalf("empty table says %q", out.String())
	}
}

func TestPlanCountsAndChangesNothing(t *testing.T) {
	defer runs.SetHeartbeatWindow(0)()
	js := world(t)
	r, err := runs.Plan(testContext(t), js, "a", runs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := want("a")
	for _, m := range r.Messages {
		if m.Count != w.Messages[m.Stream] {
			t.Errorf("plan counts %d messages on %s in %s, want %d", m.Count, m.Filter, m.Stream, w.Messages[m.Stream])
		}
	}
	if len(r.Messages) != 6 || len(r.Consumers) != 4 || r.Manifest == nil || r.Manifest.Model != "model-a" {
		t.Errorf("plan = %+v", r)
	}
	keys := map[string]uint64{}
	for _, k := range r.Keys {
		keys[k.Bucket+" "+k.Keys] = k.Count
	}
	if !maps.Equal(keys, map[string]uint64{"aerie-runs a": 1, "aerie-attempts a.*": 2}) {
		t.Errorf("plan keys = %v", keys)
	}
	if r.Empty() || len(r.Alive()) != 0 {
		t.Errorf("plan: empty %v, alive %q", r.Empty(), r.Alive())
	}
	var out bytes.Buffer
	if err := runs.WritePlan(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"5 messages", "aerie.prompts.a.>", "workers-a", "2 keys", "a.*", "aerie.turns.a.>"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan does not show %q:\n%s", want, out.String())
		}
	}
	checkSnapshot(t, "run a after Plan", snap(t, js, "a"), w)
	noCountingConsumerLeft(t, js)
	checkSnapshot(t, "run a-b after Plan", snap(t, js, "a-b"), want("a-b"))
}

func TestRemoveRemovesEverythingOfOneRunAndNothingElse(t *testing.T) {
	defer runs.SetHeartbeatWindow(0)()
	js := world(t)
	ctx := testContext(t)
	r, err := runs.Remove(ctx, js, "a", runs.RemoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages[0].Count != 5 {
		t.Errorf("Remove reports %+v", r.Messages)
	}
	checkSnapshot(t, "run a after Remove", snap(t, js, "a"), gone)
	checkSnapshot(t, "run a-b after removing a", snap(t, js, "a-b"), want("a-b"))
	var out bytes.Buffer
	if err := runs.WriteRemoved(&out, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "removed run a") || !strings.Contains(out.String(), "files on disk were not touched") {
		t.Errorf("removal report:\n%s", out.String())
	}

	// The name is free again: a producer can create the run anew.
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "a", []byte(`{}`)); err != nil {
		t.Fatalf("create the manifest of a removed run: %v", err)
	}
	list, err := runs.List(ctx, js, runs.Options{})
	if err != nil || len(list) != 2 || list[0].Progress != nil {
		t.Fatalf("after removal and a new manifest, List = %+v, %v; want a without progress", list, err)
	}

	// Nothing left: the plan is empty, and removing again is harmless.
	if err := kv.Purge(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	again, err := runs.Plan(ctx, js, "a", runs.Options{})
	if err != nil || !again.Empty() {
		t.Fatalf("plan after removal = %+v, %v; want empty", again, err)
	}
	if _, err := runs.Remove(ctx, js, "a", runs.RemoveOptions{}); err != nil {
		t.Fatalf("remove again: %v", err)
	}
}

func TestRemoveRefusesWhileAWorkerSendsHeartbeats(t *testing.T) {
	js := world(t) // the heartbeats were just sent: well inside the 10 s window
	ctx := testContext(t)
	r, err := runs.Remove(ctx, js, "a", runs.RemoveOptions{})
	var alive *runs.AliveError
	if !errors.As(err, &alive) || !strings.Contains(err.Error(), "worker w-a sent a heartbeat") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("Remove of a run with a fresh heartbeat = %v, want an AliveError naming worker w-a", err)
	}
	if r == nil || r.Heartbeat == nil || r.Heartbeat.Worker != "w-a" {
		t.Fatalf("plan returned with the refusal = %+v", r)
	}
	checkSnapshot(t, "run a after a refused Remove", snap(t, js, "a"), want("a"))

	if _, err := runs.Remove(ctx, js, "a", runs.RemoveOptions{Force: true}); err != nil {
		t.Fatalf("Remove --force: %v", err)
	}
	checkSnapshot(t, "run a after Remove --force", snap(t, js, "a"), gone)
	checkSnapshot(t, "run a-b after removing a", snap(t, js, "a-b"), want("a-b"))

	// A stopping worker still finishes what it holds: the run is alive.
	hb, _ := json.Marshal(schema.Heartbeat{Run: "a-b", Worker: "w-a-b", Paused: true, PausedReason: schema.PausedStopping})
	if _, err := js.Publish(ctx, schema.HeartbeatSubject("a-b", "w-a-b"), hb); err != nil {
		t.Fatal(err)
	}
	_, err = runs.Remove(ctx, js, "a-b", runs.RemoveOptions{})
	if !errors.As(err, &alive) || !strings.Contains(err.Error(), "(paused: stopping)") {
		t.Fatalf("Remove of a run whose worker is stopping = %v, want an AliveError saying it is stopping", err)
	}
}

func TestRemoveRefusesWhileTheAggregatorHoldsItsLease(t *testing.T) {
	defer runs.SetHeartbeatWindow(0)()
	js := world(t)
	ctx := testContext(t)
	leases, err := provision.LeasesBucket(ctx, js, provision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"a", "a-b"} {
		l, _ := json.Marshal(schema.Lease{Holder: "agg:42:x", Host: "agg", PID: 42, Dir: "/data/" + run,
			AcquiredAt: time.Now(), RenewedAt: time.Now()})
		if _, err := leases.Put(ctx, schema.AggregatorLeaseKey(run), l); err != nil {
			t.Fatal(err)
		}
	}
	_, err = runs.Remove(ctx, js, "a", runs.RemoveOptions{})
	var alive *runs.AliveError
	if !errors.As(err, &alive) || !strings.Contains(err.Error(), "aggregator on agg (pid 42, writing /data/a) holds the lease aggregator.a") {
		t.Fatalf("Remove of a run whose lease is held = %v, want an AliveError naming the holder", err)
	}
	w := want("a")
	w.Lease = true
	checkSnapshot(t, "run a after a refused Remove", snap(t, js, "a"), w)

	r, err := runs.Remove(ctx, js, "a", runs.RemoveOptions{Force: true})
	if err != nil {
		t.Fatalf("Remove --force: %v", err)
	}
	checkSnapshot(t, "run a after Remove --force", snap(t, js, "a"), gone)
	w = want("a-b")
	w.Lease = true
	checkSnapshot(t, "run a-b after removing a", snap(t, js, "a-b"), w)
	var out bytes.Buffer
	if err := runs.WriteRemoved(&out, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "/data/a on agg") {
		t.Errorf("removal report does not say where the files are:\n%s", out.String())
	}
}

// A run that never existed has nothing to remove.
func TestPlanOfAnUnknownRunIsEmpty(t *testing.T) {
	js := world(t)
	r, err := runs.Plan(testContext(t), js, "nope", runs.Options{})
	if err != nil || !r.Empty() {
		t.Fatalf("Plan(nope) = %+v, %v; want empty", r, err)
	}
	if _, err := runs.Plan(testContext(t), js, "a.b", runs.Options{}); err == nil {
		t.Fatal("a run name with a dot was accepted")
	}
}

// A server provisioned before stored turns existed has no AERIE_TURNS:
// Plan leaves it out and Remove removes the rest.
func TestRemoveWithoutTurnsStream(t *testing.T) {
	defer runs.SetHeartbeatWindow(0)()
	js := world(t)
	ctx := testContext(t)
	if err := js.DeleteStream(ctx, schema.TurnsStream); err != nil {
		t.Fatal(err)
	}
	r, err := runs.Remove(ctx, js, "a", runs.RemoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r.Messages {
		if m.Stream == schema.TurnsStream {
			t.Errorf("removal lists %s, which does not exist", m.Stream)
		}
	}
	if len(r.Messages) != 5 {
		t.Errorf("removal lists %d streams, want 5: %+v", len(r.Messages), r.Messages)
	}
}

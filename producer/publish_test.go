package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// smallServer starts a server whose max_payload is 64 KiB.
func smallServer(t *testing.T) *testEnv {
	t.Helper()
	t.Parallel()
	s, err := broker.Start(broker.Config{StoreDir: t.TempDir(), MaxPayload: 64 << 10, SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	_, js := brokertest.Connect(t, s)
	return &testEnv{js: js, logs: &logtest.Buffer{}, dir: t.TempDir()}
}

// A prompt larger than the server's max_payload is found before anything
// is published, named by line, with its size, the limit and the fix.
func TestOverMaxPayloadIsReported(t *testing.T) {
	e := smallServer(t)
	lines := promptLines(0, 5)
	lines[2] = fmt.Sprintf(`{"id":"big","prompt":%q}`, strings.Repeat("x", 100<<10))
	cfg := e.config(e.file(t, "p.jsonl", lines))

	_, err := Run(ctxFor(t), e.js, cfg)
	var inv *InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("error %v, want an InvalidError", err)
	}
	for _, want := range []string{
		cfg.PromptsFile + `:3: prompt "big" is a 100.`,
		"KiB message, over the server's max_payload of 64.0 KiB",
		"raise max_payload in the nats-server configuration (aerie's embedded server allows 8.0 MiB)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if got := storedPrompts(t, e.js); got != 0 {
		t.Fatalf("stream holds %d prompts, want none", got)
	}

	cfg.SkipInvalid = true
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != 4 || rep.Invalid != 1 || rep.Problems[0].Line != 3 {
		t.Fatalf("report %+v", rep)
	}
	if got := storedPrompts(t, e.js); got != 4 {
		t.Fatalf("stream holds %d prompts, want 4", got)
	}
}

// Should a message still be refused as too large when it is published
// (say the server was reconfigured between the passes), it is a failure
// with the same explanation, never a silent loss.
func TestOverMaxPayloadAtPublishIsAFailure(t *testing.T) {
	e := smallServer(t)
	ctx := ctxFor(t)
	if err := provision.Streams(ctx, e.js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("p.jsonl").withDefaults()
	pub := newPublisher(e.js, cfg, nil, e.js.Conn().MaxPayload(), nil)
	pub.start(ctx)
	for i, text := range []string{"small", strings.Repeat("x", 100<<10)} {
		id := fmt.Sprintf("p%d", i)
		m, err := promptMessage(&schema.Prompt{Run: cfg.Run, Source: "p.jsonl:1", ID: id, Messages: []schema.Message{user(text)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.add(ctx, &entry{line: i + 1, id: id, msg: m}); err != nil {
			t.Fatal(err)
		}
	}
	pub.finish(ctx)
	published, already, failed, problems := pub.results()
	if published != 1 || already != 0 || failed != 1 {
		t.Fatalf("published %d, already %d, failed %d", published, already, failed)
	}
	if p := problems[0]; p.Line != 2 || !strings.Contains(p.Reason, `prompt "p1" is a 100.`) || !strings.Contains(p.Reason, "max_payload of 64.0 KiB") {
		t.Fatalf("problem %s", p)
	}
}

// Transient failures of every kind (refused at once, failed later, stored
// but unacknowledged) are retried with the same message until stored; a
// lost acknowledgement does not turn a new prompt into "already queued".
func TestTransientFailuresAreRetried(t *testing.T) {
	e := setup(t)
	const n = 100
	cfg := e.config(e.file(t, "p.jsonl", promptLines(0, n)))
	cfg.alone = true // the faults are injected into single publishes
	faults := map[string]fault{}
	for i := 0; i < n; i += 10 {
		faults[schema.PromptSubject(cfg.Run, schema.Unit{ID: fmt.Sprintf("p-%05d", i)})] = failSync
		faults[schema.PromptSubject(cfg.Run, schema.Unit{ID: fmt.Sprintf("p-%05d", i+1)})] = failAsync
		faults[schema.PromptSubject(cfg.Run, schema.Unit{ID: fmt.Sprintf("p-%05d", i+2)})] = loseAck
	}
	js := newFaultyJS(e.js, func(subject string, attempt, _ int) fault {
		if attempt == 1 {
			return faults[subject]
		}
		return noFault
	})
	rep, err := Run(ctxFor(t), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != n || rep.AlreadyQueued != 0 || rep.Failed != 0 {
		t.Fatalf("report %+v, want all %d published", rep, n)
	}
	if got := js.totalCalls(); got != n+len(faults) {
		t.Errorf("%d publish attempts, want %d", got, n+len(faults))
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("stream holds %d prompts, want %d", got, n)
	}
}

// A prompt that cannot be published within its attempts is named in the
// error, which says to produce again; producing again publishes it alone.
func TestPublishFailureIsReportedAndRepaired(t *testing.T) {
	e := setup(t)
	const n = 20
	cfg := e.config(e.file(t, "p.jsonl", promptLines(0, n)))
	cfg.Retries = 3
	cfg.alone = true // the fault is injected into single publishes
	broken := schema.PromptSubject(cfg.Run, schema.Unit{ID: "p-00004"})
	js := newFaultyJS(e.js, func(subject string, _, _ int) fault {
		if subject == broken {
			return failSync
		}
		return noFault
	})
	rep, err := Run(ctxFor(t), js, cfg)
	var inc *IncompleteError
	if !errors.As(err, &inc) {
		t.Fatalf("error %v, want an IncompleteError", err)
	}
	if rep.Published != n-1 || rep.Failed != 1 || inc.Failed != 1 {
		t.Fatalf("report %+v", rep)
	}
	for _, want := range []string{
		"1 of 20 prompts of " + cfg.PromptsFile + " were not published to run r1",
		cfg.PromptsFile + `:5: prompt "p-00004" not published after 3 attempts: injected outage`,
		"run the same produce again",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if logs := e.logs.String(); !strings.Contains(logs, "level=WARN msg=\"produce finished\"") || !strings.Contains(logs, "failed=1") {
		t.Errorf("summary does not show the failure:\n%s", logs)
	}

	cfg.alone = false // the repair goes in a batch, refused whole for the prompts queued
	rep, err = Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != 1 || rep.AlreadyQueued != n-1 {
		t.Fatalf("repair produce: %+v", rep)
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("stream holds %d prompts, want %d", got, n)
	}
}

// With a small MaxPending the producer never has more publishes awaiting
// acknowledgement than allowed.
func TestMaxPendingBoundsOutstandingPublishes(t *testing.T) {
	e := setup(t)
	const n, limit = 300, 8
	cfg := e.config(e.file(t, "p.jsonl", promptLines(0, n)))
	cfg.MaxPending = limit
	cfg.alone = true // bounds the asynchronous single publishes
	worst := 0
	var pending func() int
	js := newFaultyJS(e.js, func(string, int, int) fault {
		worst = max(worst, pending())
		return noFault
	})
	pending = func() int { return js.JetStream.PublishAsyncPending() }
	rep, err := Run(ctxFor(t), js, cfg)
	if err != nil || rep.Published != n {
		t.Fatalf("%+v, %v", rep, err)
	}
	// Counted before each publish: at most limit-1 others are outstanding.
	if worst >= limit {
		t.Fatalf("%d publishes were outstanding, limit %d", worst, limit)
	}
	if worst == 0 {
		t.Fatal("no publish ever overlapped another: the test measures nothing")
	}
}

var _ jetstream.JetStream = (*faultyJS)(nil)

// When the stream drops publishes (stores them, or not, and never
// answers), every pending publish times out AckTimeout after it was sent,
// all together, not one after another: the produce ends in a few
// AckTimeouts per attempt and reports the prompts as not queued.
//
// The prompts stream is set to NoAck, which makes the server store what
// is published to it and never answer the publisher: not the
// acknowledgement, not the refusal of a repeat. That is what a publisher
// sees from a stream leader that drops publishes; a missing stream would
// not do, since the server then answers at once with "no responders".
func TestDroppedAcksTimeOutTogether(t *testing.T) {
	e := setup(t)
	const (
		n          = DefaultMaxPending // all pending at once
		retries    = 2
		ackTimeout = 400 * time.Millisecond
	)
	ctx := ctxFor(t)
	if err := provision.Streams(ctx, e.js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := e.js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		t.Fatal(err)
	}
	silent := s.CachedInfo().Config
	silent.NoAck = true
	if _, err := e.js.UpdateStream(ctx, silent); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(e.file(t, "p.jsonl", promptLines(0, n)))
	cfg.Retries, cfg.AckTimeout = retries, ackTimeout

	// Waiting for each acknowledgement in turn, with a fresh timeout each,
	// takes at least n*retries*ackTimeout (205 s); allow a tenth of it.
	sequential := n * retries * ackTimeout
	bound := sequential / 10
	runCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	rep, err := Run(runCtx, e.js, cfg)
	elapsed := time.Since(start)
	t.Logf("produce ended after %v", elapsed)

	var inc *IncompleteError
	if !errors.As(err, &inc) {
		t.Fatalf("after %v: error %v, want an IncompleteError", elapsed, err)
	}
	if elapsed >= bound {
		t.Fatalf("produce took %v with every acknowledgement dropped; timeouts one after another would take %v, want under %v", elapsed, sequential, bound)
	}
	if rep.Failed != n || rep.Published != 0 || inc.Failed != n {
		t.Fatalf("report %+v, want all %d failed", rep, n)
	}
	want := fmt.Sprintf("not published after %d attempts: no acknowledgement from the server within %v", retries, ackTimeout)
	for _, p := range rep.Problems {
		if !strings.Contains(p.Reason, want) {
			t.Fatalf("problem %s, want %q", p, want)
		}
	}
}

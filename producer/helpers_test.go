package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/schema"
)

// testEnv is one embedded server and what a test needs around it.
type testEnv struct {
	js   jetstream.JetStream
	logs *logtest.Buffer
	dir  string
}

func setup(t *testing.T) *testEnv {
	t.Helper()
	t.Parallel()
	s := brokertest.Start(t)
	_, js := brokertest.Connect(t, s)
	return &testEnv{js: js, logs: &logtest.Buffer{}, dir: t.TempDir()}
}

// config is a produce of file to run r1 with model m.
func (e *testEnv) config(file string) Config {
	return Config{
		Run:         "r1",
		PromptsFile: file,
		Model:       "m",
		Logger:      slog.New(slog.NewTextHandler(e.logs, nil)),
	}
}

// file writes lines (each followed by a newline) to name in the test's
// directory.
func (e *testEnv) file(t *testing.T, name string, lines []string) string {
	t.Helper()
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// promptLines returns n valid lines with ids p-<from> onwards.
func promptLines(from, n int) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"id":"p-%05d","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"question %d"}]}`, from+i, from+i)
	}
	return lines
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// storedPrompts counts the messages in the prompts stream (0 if it does
// not exist).
func storedPrompts(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(ctxFor(t), schema.PromptsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// storedManifest returns the run's manifest, or nil when there is none.
func storedManifest(t testing.TB, js jetstream.JetStream, run string) *schema.Manifest {
	t.Helper()
	ctx := ctxFor(t)
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := schema.DecodeManifest(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fetchPrompts reads the n prompt messages of run in stream order.
func fetchPrompts(t testing.TB, js jetstream.JetStream, run string, n int) []jetstream.Msg {
	t.Helper()
	ctx := ctxFor(t)
	cons, err := js.OrderedConsumer(ctx, schema.PromptsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schema.RunFilter(schema.PromptsRoot, run)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < n {
		batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		before := len(out)
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if len(out) == before {
			t.Fatalf("read %d prompt messages of run %s, want %d", len(out), run, n)
		}
	}
	return out
}

// fault is what faultyJS does with one publish attempt.
type fault int

const (
	noFault fault = iota
	// failSync: PublishMsgAsync returns an error; nothing is sent.
	failSync
	// failAsync: the future reports an error; nothing is sent.
	failAsync
	// noRoomAsync: the future reports the server's "insufficient
	// resources" of a full store; nothing is sent.
	noRoomAsync
	// loseAck: the message is published, but the future reports a
	// timeout as if the acknowledgement were lost.
	loseAck
)

// faultyJS wraps a JetStream context and decides, for each publish
// attempt, whether to let it through or fail it.
type faultyJS struct {
	jetstream.JetStream
	// decide is called with the subject, the attempt number for that
	// subject (from 1) and the number of publishes so far (from 1).
	decide func(subject string, attempt, calls int) fault

	mu       sync.Mutex
	attempts map[string]int
	calls    int
}

func newFaultyJS(js jetstream.JetStream, decide func(subject string, attempt, calls int) fault) *faultyJS {
	return &faultyJS{JetStream: js, decide: decide, attempts: map[string]int{}}
}

func (f *faultyJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f.mu.Lock()
	f.attempts[m.Subject]++
	f.calls++
	attempt, calls := f.attempts[m.Subject], f.calls
	f.mu.Unlock()
	switch f.decide(m.Subject, attempt, calls) {
	case failSync:
		return nil, errors.New("injected outage")
	case failAsync:
		return newErrFuture(m, jetstream.ErrNoStreamResponse), nil
	case noRoomAsync:
		return newErrFuture(m, &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}), nil
	case loseAck:
		if _, err := f.JetStream.PublishMsgAsync(m, opts...); err != nil {
			return nil, err
		}
		return newErrFuture(m, jetstream.ErrAsyncPublishTimeout), nil
	}
	return f.JetStream.PublishMsgAsync(m, opts...)
}

func (f *faultyJS) totalCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// errFuture is a publish future that has failed.
type errFuture struct {
	msg *nats.Msg
	err chan error
}

func newErrFuture(m *nats.Msg, err error) *errFuture {
	f := &errFuture{msg: m, err: make(chan error, 1)}
	f.err <- err
	return f
}

func (f *errFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f *errFuture) Err() <-chan error            { return f.err }
func (f *errFuture) Msg() *nats.Msg               { return f.msg }

var _ jetstream.PubAckFuture = (*errFuture)(nil)

func user(s string) schema.Message   { return schema.Message{Role: "user", Content: s} }
func system(s string) schema.Message { return schema.Message{Role: "system", Content: s} }

func sameMessages(a, b []schema.Message) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

package provision_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// recorder is a slog handler that keeps every record's message.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}

// newRecorder returns a recorder whose records are printed if t fails.
func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logged: %q", r.all())
		}
	})
	return r
}

// warnings returns the warnings that contain every one of parts.
func (r *recorder) warnings(parts ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
next:
	for _, m := range r.msgs {
		if !strings.HasPrefix(m, "WARN ") {
			continue
		}
		for _, p := range parts {
			if !strings.Contains(m, p) {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// waitManifest runs WaitManifest in the background and returns its result
// on a channel.
func waitManifest(ctx context.Context, t *testing.T, js jetstream.JetStream, run string, log *slog.Logger) <-chan *schema.Manifest {
	t.Helper()
	got := make(chan *schema.Manifest, 1)
	go func() {
		m, err := provision.WaitManifest(ctx, js, run, log)
		if err != nil && ctx.Err() == nil {
			t.Errorf("WaitManifest: %v", err)
		}
		got <- m
	}()
	return got
}

// A worker started with a mistyped --run used to wait in silence for
// ever. After the warning interval, and at every interval after that, it
// says the run has no manifest and which runs the server has.
func TestWaitManifestWarnsAndListsTheRunsThatExist(t *testing.T) {
	defer provision.SetManifestWarnInterval(100 * time.Millisecond)()
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want []string
	for i := 21; i >= 0; i-- { // 22 runs, written out of order
		run := fmt.Sprintf("run-%02d", i)
		brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 1}, nil)
		if i < 20 {
			want = append([]string{run}, want...)
		}
	}
	rec := newRecorder(t)
	got := waitManifest(ctx, t, js, "rnu-00", slog.New(rec))

	parts := []string{"run rnu-00 has no manifest yet", strings.Join(want, ", ") + " and 2 more", "(did you mean --run run-00?)", "check --run and --nats", "aerie produce"}
	brokertest.Eventually(t, 20*time.Second, func() bool { return len(rec.warnings(parts...)) >= 2 },
		"two warnings containing %q", parts)

	brokertest.Queue(t, js, schema.Manifest{Run: "rnu-00", Model: "m"}, nil)
	select {
	case m := <-got:
		if m == nil || m.Run != "rnu-00" {
			t.Fatalf("WaitManifest returned %+v, want the manifest of rnu-00", m)
		}
	case <-ctx.Done():
		t.Fatal("WaitManifest did not return once the manifest was written")
	}
}

// A mistyped --run on a server with other runs is said at once, not
// after the warning interval.
func TestWaitManifestSaysAtOnceThatTheRunIsNotThere(t *testing.T) {
	defer provision.SetManifestWarnInterval(time.Hour)()
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokertest.Queue(t, js, schema.Manifest{Run: "kimi-k25-25k", Total: 1}, nil)
	rec := newRecorder(t)
	waitManifest(ctx, t, js, "kimi-k25-2k", slog.New(rec))
	parts := []string{"run kimi-k25-2k has no manifest yet", "runs on this server: kimi-k25-25k (did you mean --run kimi-k25-25k?)"}
	brokertest.Eventually(t, 10*time.Second, func() bool { return len(rec.warnings(parts...)) >= 1 }, "a warning containing %q", parts)
}

// On a server where nothing was ever produced the warning says so.
func TestWaitManifestWarnsWhenNoRunWasEverProduced(t *testing.T) {
	defer provision.SetManifestWarnInterval(100 * time.Millisecond)()
	_, js := brokertest.Connect(t, brokertest.Start(t))
	ctx, cancel := context.WithCancel(context.Background())
	rec := newRecorder(t)
	got := waitManifest(ctx, t, js, "r", slog.New(rec))
	defer func() { cancel(); <-got }()

	parts := []string{"run r has no manifest yet", "no run at all has been produced on this server", "check --run and --nats", "aerie produce"}
	brokertest.Eventually(t, 20*time.Second, func() bool { return len(rec.warnings(parts...)) >= 2 },
		"two warnings containing %q", parts)
}

package aggregator

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/schema"
)

// The run directory and every file the aggregator writes take their mode
// from the umask, failed.jsonl too after a rewrite replaced it: with
// aerie's default 0077 nobody but the owner reads the answers, with 0022
// everyone may. The umask is per process, so this test is not parallel.
func TestOutputModesFollowTheUmask(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	for _, tc := range []struct {
		umask     int
		dir, file os.FileMode
	}{{0o077, 0o700, 0o600}, {0o022, 0o755, 0o644}} {
		t.Run(fsmode.FormatUmask(tc.umask), func(t *testing.T) {
			run := "modes" + fsmode.FormatUmask(tc.umask)
			brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 1}, nil)
			old := fsmode.SetUmask(tc.umask)
			defer fsmode.SetUmask(old)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			data := filepath.Join(t.TempDir(), "data")
			a, err := New(Config{Run: run, DataDir: data, Batch: 1, EventInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, js)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- a.Run(runCtx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			// A dead letter, then the answer that takes its line out of
			// failed.jsonl through a rewrite.
			dl, _ := schema.EncodeDeadLetter(&schema.DeadLetter{Run: run, ID: "p1", Reason: schema.ReasonExhausted, FailedAt: time.Now().UTC()})
			res, _ := schema.EncodeResult(&schema.Result{Run: run, ID: "p1", Content: "answer", FinishReason: "stop"})
			if _, err := js.Publish(ctx, schema.DeadSubject(run, schema.Unit{ID: "p1"}), dl); err != nil {
				t.Fatal(err)
			}
			brokertest.Eventually(t, 30*time.Second, func() bool { return a.Last().Failed == 1 }, "dead letter written")
			if _, err := js.Publish(ctx, schema.ResultSubject(run, schema.Unit{ID: "p1"}), res); err != nil {
				t.Fatal(err)
			}
			brokertest.Eventually(t, 30*time.Second, func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return a.Last().Completed == 1 && a.failed.rewrites > 0
			}, "answer written and failed.jsonl rewritten")
			brokertest.Eventually(t, 30*time.Second, func() bool {
				st, err := os.Stat(filepath.Join(data, run, EventsFile))
				return err == nil && st.Size() > 0
			}, "an event written")
			checkMode(t, filepath.Join(data, run), tc.dir)
			for _, name := range []string{CompletionsFile, FailedFile, EventsFile} {
				checkMode(t, filepath.Join(data, run, name), tc.file)
			}
		})
	}
}

// A file that exists keeps its mode when the aggregator rewrites it:
// the owner's choice (here 0640, to share with a group) stands.
func TestRewriteKeepsTheModeOfTheFile(t *testing.T) {
	old := fsmode.SetUmask(0o077)
	defer fsmode.SetUmask(old)
	path := filepath.Join(t.TempDir(), "failed.jsonl")
	if err := os.WriteFile(path, []byte("{\"id\":\"a\"}\n{\"id\":\"b\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	j, err := openJSONL(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	checkMode(t, path, 0o640)
	if err := j.rewrite(map[string]bool{schema.Unit{ID: "a"}.Key(): true}, nil); err != nil {
		t.Fatal(err)
	}
	if j.rewrites != 1 {
		t.Fatalf("%d rewrites, want 1", j.rewrites)
	}
	checkMode(t, path, 0o640)
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s has mode %04o, want %04o", path, got, want)
	}
}

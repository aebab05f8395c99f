package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/broker"
)

// Two servers on one store would both write JetStream's files and corrupt
// them: the second refuses to start and says who holds the store. flock
// locks belong to an open file, not to a process, so two servers in one
// process exclude each other just as two processes do.
func TestSecondServerOnOneStoreRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	first, err := broker.Start(broker.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	second, err := broker.Start(broker.Config{StoreDir: dir})
	if err == nil {
		second.Shutdown()
		first.Shutdown()
		t.Fatal("a second server started on a store in use")
	}
	var inUse *broker.StoreInUseError
	if !errors.As(err, &inUse) {
		first.Shutdown()
		t.Fatalf("err = %v (%T), want a StoreInUseError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{
		dir, "in use",
		"pid " + strconv.Itoa(os.Getpid()),
		first.Addr(),
		"since ",
		"stop that server", "--store", "--data-dir",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if inUse.PID != os.Getpid() || inUse.Addr != first.Addr() || inUse.Since.IsZero() {
		t.Errorf("holder = %+v, want pid %d at %s with a start time", inUse, os.Getpid(), first.Addr())
	}

	first.Shutdown()
	third, err := broker.Start(broker.Config{StoreDir: dir})
	if err != nil {
		t.Fatalf("after the first server shut down, a new one on its store: %v", err)
	}
	third.Shutdown()
}

// A server killed without shutting down leaves its lock file behind, with
// its record in it; the operating system has released the lock, so the
// next server starts.
func TestLockFileLeftByADeadServerDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	stale := `{"pid":999999,"host":"gone","addr":"127.0.0.1:4222","since":"2026-01-01T00:00:00Z"}`
	if err := os.WriteFile(filepath.Join(dir, broker.LockFileName), []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := broker.Start(broker.Config{StoreDir: dir})
	if err != nil {
		t.Fatalf("start over a stale lock file: %v", err)
	}
	defer s.Shutdown()
	b, err := os.ReadFile(filepath.Join(dir, broker.LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"pid":`+strconv.Itoa(os.Getpid())) || !strings.Contains(string(b), s.Addr()) {
		t.Fatalf("lock file holds %s, want this process and %s", b, s.Addr())
	}
}

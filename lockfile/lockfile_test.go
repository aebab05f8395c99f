package lockfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/lockfile"
)

func TestSecondHolderIsRefusedAndNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	first, err := lockfile.Acquire(path, "the first")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockfile.Acquire(path, "the second")
	var held *lockfile.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire = %v, want a HeldError", err)
	}
	if held.Holder.PID != os.Getpid() || held.Holder.What != "the first" || !strings.Contains(err.Error(), "the first") {
		t.Errorf("holder = %+v (%v), want this process, described as the first", held.Holder, err)
	}
	first.Release()
	first.Release() // twice is fine
	again, err := lockfile.Acquire(path, "the third")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.Release()
}

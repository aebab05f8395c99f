//go:build unix

package worker

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/hiddenstates"
)

// The sweep removes a server's file, and its lock, that stood unlocked
// and unchanged for orphanAge; it leaves a younger one, one whose writer
// holds the lock, and files of other kinds.
func TestSweepRemovesOrphansOnly(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old := now.Add(-2 * orphanAge)
	file := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	orphan := file("a.safetensors", old)
	file("a.safetensors.lock", old)
	young := file("b.safetensors", now.Add(-orphanAge/2))
	held := file("c.safetensors", old)
	lock, err := os.Create(hiddenstates.LockName(held))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(lock.Name(), old, old)
	other := file("notes.txt", old)

	x := &extractWork{}
	if n := x.sweep(now); n != 0 {
		t.Fatalf("swept %d before the server's directory was known", n)
	}
	x.serverDir.Store(&dir)
	if n := x.sweep(now); n != 1 {
		t.Errorf("swept %d files, want 1", n)
	}
	for _, p := range []string{orphan, hiddenstates.LockName(orphan)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want removed", p, err)
		}
	}
	for _, p := range []string{young, held, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v, want kept", p, err)
		}
	}
}

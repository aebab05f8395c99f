package worker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/aerie-dev/aerie/hiddenstates"
)

// A request cancelled before its reply (the worker stopped or killed,
// the attempt timed out) may still have its file written by the server,
// at a path no one learns. Such orphans are removed by a sweep of the
// server's directory: a file, with its lock, that no writer holds and
// that has not changed for orphanAge is no attempt's, since an attempt
// publishes its file within moments of the lock's release. A sweep can
// never publish a wrong file: a file it removed under an attempt that
// had opened it is either copied whole from the open file, or found
// gone when it is linked, and the attempt tried again.

// orphanAge is how long a server's file must have stood unchanged and
// unlocked before the sweep takes it for an orphan.
const orphanAge = time.Minute

// sweepEvery is how often the server's directory is swept.
const sweepEvery = 20 * time.Second

// sweepOrphans sweeps the server's directory every sweepEvery until ctx
// ends.
func (x *extractWork) sweepOrphans(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := x.sweep(time.Now()); n > 0 {
			log.Info("removed files of abandoned extraction attempts from the server's directory", "files", n)
		}
	}
}

// sweep removes the orphans of the server's directory, as of now, and
// returns how many.
func (x *extractWork) sweep(now time.Time) int {
	dir := x.serverDir.Load()
	if dir == nil {
		return 0
	}
	entries, err := os.ReadDir(*dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || filepath.Ext(name) != ".safetensors" {
			continue
		}
		path := filepath.Join(*dir, name)
		if !orphaned(path, now) {
			continue
		}
		removeServerFile(path)
		n++
	}
	return n
}

// orphaned reports whether the server's file at path, and its lock, have
// stood unchanged for orphanAge as of now, with no writer holding the
// lock.
func orphaned(path string, now time.Time) bool {
	for _, p := range []string{path, hiddenstates.LockName(path)} {
		info, err := os.Stat(p)
		if err == nil && now.Sub(info.ModTime()) < orphanAge {
			return false
		}
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	unlock, err := hiddenstates.WaitWritten(done, path, time.Millisecond)
	if err != nil {
		return false
	}
	unlock()
	return true
}

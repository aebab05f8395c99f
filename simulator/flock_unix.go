//go:build unix

package simulator

import (
	"os"
	"syscall"
)

// lockExclusive creates path (or truncates it) and holds an exclusive
// flock on it until the returned file is closed, as vLLM's hidden-states
// connector holds the lock beside a file it is writing.
func lockExclusive(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
